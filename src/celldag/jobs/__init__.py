"""What the workflow's jobs do (download, prepare, run, chain, evaluate) and the resources and envs they get."""
