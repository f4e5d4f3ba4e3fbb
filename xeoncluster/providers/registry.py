"""Every provider's spec, by name, and the checks of shared config keys that ask each of them."""
from __future__ import annotations

from xeoncluster.providers.aws.spec import AWS
from xeoncluster.providers.local.spec import LOCAL
from xeoncluster.providers.spec import ProviderSpec

DEFAULT_PROVIDER = "aws"


def specs() -> dict[str, ProviderSpec]:
    return {spec.name: spec for spec in (AWS, LOCAL)}


def spec_for(name: str) -> ProviderSpec:
    return specs()[name]


def moved_keys() -> dict[str, str]:
    """Config keys that were top-level before 0.2, and the provider section each now lives in."""
    return {key: spec.name for spec in specs().values() for key in spec.moved_keys}


def is_storage_url(value: str) -> bool:
    return any(spec.storage_url is not None and spec.storage_url.fullmatch(value) for spec in specs().values())


def storage_forms() -> str:
    """The storage URLs every provider serves, for people: 's3://BUCKET/PREFIX (aws) or an absolute folder'."""
    served = [f"{spec.storage_url_text} ({spec.name})" for spec in specs().values() if spec.storage_url_text]
    return ", ".join([*served, "or an absolute folder"]) if served else "an absolute folder"


def is_image_id(value: str) -> bool:
    return any(spec.image_id.fullmatch(value) for spec in specs().values())


def image_id_texts() -> str:
    return ", ".join(spec.image_id_text for spec in specs().values())


def check_image(value: str) -> str:
    if value in ("auto", "none") or is_image_id(value):
        return value
    raise ValueError(f"must be 'auto', 'none', {image_id_texts()}")
