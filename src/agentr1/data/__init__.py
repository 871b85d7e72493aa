"""agentr1.data"""
