"""The method-agnostic federated round loop. Nothing here knows any method by name."""
