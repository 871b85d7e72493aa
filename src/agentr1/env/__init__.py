"""agentr1.env"""
