"""Machines for a cluster: the contract every provider meets (base.py), their declarations (spec.py,
registry.py) and one subpackage per provider. Importing this package imports none of them."""
