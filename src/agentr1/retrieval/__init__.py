"""agentr1.retrieval"""
