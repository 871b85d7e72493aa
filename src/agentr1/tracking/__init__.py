"""agentr1.tracking"""
