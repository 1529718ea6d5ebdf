"""Writing the planned shards and committing the dataset (the policy here, the format in dataset/)."""
