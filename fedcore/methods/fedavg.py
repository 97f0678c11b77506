"""FedAvg: local SGD on every client, averaged by sample count.

McMahan, Moore, Ramage, Hampson, Agüera y Arcas. "Communication-Efficient Learning of
Deep Networks from Decentralized Data." AISTATS 2017, arXiv:1602.05629.

Local SGD on each sampled client, then the sample-count-weighted mean of the client
models. The `StagedMethod` defaults are exactly this, so nothing is overridden.
Departures: none.
"""

from fedcore.methods.base import StagedMethod
from fedcore.methods.registry import register


@register("fedavg")
class FedAvg(StagedMethod):
    pass
