"""The local provider's plugin: it builds network-namespace nodes, and finds a cluster's namespaces,
bridge and sshds on this machine when its state is gone."""
from __future__ import annotations

from xeoncluster.providers.local.leftovers import locate
from xeoncluster.providers.local.provider import make
from xeoncluster.providers.local.spec import LOCAL
from xeoncluster.providers.plugin import ProviderPlugin

LOCAL_PLUGIN = ProviderPlugin(spec=LOCAL, make=make, locate=locate)
