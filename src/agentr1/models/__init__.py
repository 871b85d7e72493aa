"""agentr1.models"""
