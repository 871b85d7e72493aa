"""The MLflow tag names agentr1 writes and searches by, in one place that imports nothing, so every
tracking module (runs, the adapter, the registry, ``agentr1 track``) can name them without
importing another."""

ROLE_TAG = "agentr1.role"  # "stage" on a stage's run, "pipeline" on the pipeline's parent run
PIPELINE_TAG = "agentr1.pipeline_id"
STAGE_TAG = "agentr1.stage"
GROUP_TAG = "agentr1.run"  # the named run a train@/evaluate@ <run>-<seed> run is a seed of (W&B's run group)
RUN_NAME_TAG = "agentr1.run_name"  # the stage's dvc.lock key (train@ppo), also the run's name
LOGGED_FROM_TAG = "agentr1.logged_from"  # "dvc.lock" on a run reconstructed from the outputs (`agentr1 track`)
CHECKPOINT_TAG = "agentr1.checkpoint_sha256"  # the weights a train@ run wrote (agentr1.io.tree_digest)
EVAL_DATA_TAG = "agentr1.eval_data"  # fingerprint of the evaluated questions (the gate compares like with like)
ARTIFACT_TAG = "agentr1.artifact_sha256"  # digest of a registered version's stored files
