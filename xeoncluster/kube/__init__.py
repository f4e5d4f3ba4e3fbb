"""Kubernetes manifests for the same training job `train` runs on EC2: a Kubeflow TrainJob (Trainer v2)
or a PyTorchJob (the legacy Training Operator), and a Dockerfile for their image.

Everything here is offline: values in, plain dicts and text out. No module talks to a cluster.

- machine.py: the instance type's facts (catalog) and the topology of the CPUs a pod gets
- resources.py: the rule for what one pod takes of its node (requests == limits)
- pod_paths.py: where the job's files live (the PVC, the image's package root)
- launch.py: torchrun, the program each rank runs (the seam for other programs), the planner's env
- job_spec.py: what the user asked for, checked, and the job's values both manifests are built from
- pod.py: the container and pod fragments both kinds share
- trainjob.py, pytorchjob.py: the two manifests
- dockerfile.py: the image with the stack's pins, tcmalloc and the training package
- export.py: the entry point the CLI calls, and the YAML rendering
"""
