"""The moto account the stand-in serves, and EC2's errors as moto raises them to the CLI."""
from __future__ import annotations

ACCOUNT = "123456789012"


def ec2_error(code: str, message: str) -> Exception:
    from moto.ec2.exceptions import EC2ClientError

    return EC2ClientError(code, message)
