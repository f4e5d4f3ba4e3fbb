"""A user's own script on the nodes: the HF Trainer hook and how the script learns it must stop. The
wrapper itself stays at node/user_script.py, the module path remote command lines run."""
