"""agentr1.lm: language-model training - pretraining the base (``pretrain``), the supervised cold start (``sft``) and the optimizer and lr schedule they and the RL trainer share (``schedule``)."""
