"""agentr1.rollout"""
