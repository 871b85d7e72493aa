"""agentr1.eval"""
