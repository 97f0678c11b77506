"""FedAvg placeholder registration (the full method lands with the engine)."""

from fedcore.methods.registry import register


@register("fedavg")
class FedAvg:
    def __init__(self, cfg, params) -> None:
        self.cfg, self.params = cfg, params
