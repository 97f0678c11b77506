"""Where fedcore runs: the environment contract (`env`) and the Kubernetes manifests (`k8s`).

`env` names every environment variable fedcore reads and the Kubernetes objects `k8s/` creates;
`k8s` renders the kustomize overlays, validates and polices them, and holds the in-cluster smoke
check. `fedcore deploy ...` (fedcore.cli.deploy) is the command line over both.
"""
