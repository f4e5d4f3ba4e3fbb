"""The local provider never replaces or removes an image that live nodes overlay."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from xeoncluster.core.errors import ProviderError
from xeoncluster.providers.base import Node
from xeoncluster.providers.config import load_config
from xeoncluster.providers.local.provider import LocalProvider

KEY = "ab" * 32


def image_in_use(root: Path) -> Path:
    image = root / "images" / f"local-{KEY[:16]}"
    (image / "home" / "venv").mkdir(parents=True)
    (image / "image.json").write_text(json.dumps({"id": image.name, "key": KEY, "name": "n"}))
    node = root / "clusters" / "c1" / "node0"
    node.mkdir(parents=True)
    (node / "node.json").write_text(json.dumps({"role": "master", "lower": str(image / "home"), "ip": "10.9.0.2"}))
    return image


def test_bake_refuses_to_replace_an_image_live_nodes_use(tmp_path: Path) -> None:
    image = image_in_use(tmp_path)
    baker = Node(name="node0", id="xc-c2-node0", private_ip="10.9.0.3", ssh_host="10.9.0.3", role="master",
                 market="local")
    config = load_config(None, {"name": "c2", "provider": "local", "local.root": str(tmp_path)})
    with pytest.raises(ProviderError, match=r"in use by running nodes \(c1/node0\); refusing to bake over it"):
        LocalProvider(tmp_path).bake(config, baker, KEY)
    assert (image / "home" / "venv").is_dir()


def test_remove_image_refuses_while_nodes_use_it(tmp_path: Path) -> None:
    image = image_in_use(tmp_path)
    with pytest.raises(ProviderError, match="refusing to remove it"):
        LocalProvider(tmp_path).remove_image(image.name)
    assert (image / "home" / "venv").is_dir()
