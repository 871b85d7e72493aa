"""agentr1.rl"""
