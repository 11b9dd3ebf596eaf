"""Reward models: training one on preference pairs (`zoo rm train RM.yaml`) and making pairs from a
task with gold answers by sampling the policy (`zoo rm pairs PAIRS.yaml`), one module a job:

    config.py   RMTrainConfig, PairsConfig (the two files' schemas) and load_config
    data.py     preference pairs from local JSONL or a `datasets` source -> texts the reward model reads
    train.py    train_reward_model: Bradley-Terry loss, held-out pairwise accuracy before/after, HF checkpoint
    pairs.py    make_pairs: correct vs incorrect completions, optional length confound and label noise

The checkpoint `zoo rm train` writes (`<output_dir>/model`) is what the `reward_model` reward loads
(zoo.rewards.reward_model) and what `critic.init: reward_model` starts the critic from.
"""
