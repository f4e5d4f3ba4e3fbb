"""`xeoncluster up`: the steps in order (up.py), an image another up is still baking (up_image.py),
what a failure undoes (up_rollback.py), up on a cluster that is up (up_again.py), the bake lock."""
