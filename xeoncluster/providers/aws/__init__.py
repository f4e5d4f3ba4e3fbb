"""The AWS provider: EC2 machines, IAM roles and S3 storage."""
