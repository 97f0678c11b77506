"""RoundPlan.probe: a no-training client phase whose answers reshape the round's plan."""

from types import SimpleNamespace

import torch

from fedcore.engine.loop import RoundLoop
from fedcore.engine.sampler import ClientSampler
from fedcore.engine.store import ClientStateStore
from fedcore.engine.types import ClientUpdate, RoundMetrics, RoundPlan, ServerState, Stage


class ProbeThenTrain:
    """Asks clients 0 and 2 for their id, then tells every client the sum."""

    name, personal_keys = "probe-test", ()
    stages = (Stage("train", 1, cohort="all"),)

    def __init__(self):
        self.seen = []

    def plan_round(self, state, rnd):
        return RoundPlan(stage=state.stage, probe=[0, 2], instructions={"phase": "probe"})

    def client_probe(self, task):
        return ClientUpdate(cid=task.cid, num_examples=0, uploads={"id": task.cid}, state={"touched": True})

    def after_probe(self, state, plan, answers):
        total = sum(a.uploads["id"] for a in answers)
        return RoundPlan(stage=plan.stage, instructions={"phase": "main", "sum": total})

    def client_update(self, task):
        self.seen.append((task.cid, dict(task.instructions)))
        return ClientUpdate(cid=task.cid, num_examples=1)

    def server_update(self, state, plan, updates):
        return state, RoundMetrics()


def test_probe_answers_reach_every_main_task_and_leave_no_state():
    method = ProbeThenTrain()
    ctx = SimpleNamespace(seed=0, clients=[object()] * 3)
    store = ClientStateStore(3)
    loop = RoundLoop(method, ctx, ClientSampler(3, 1.0, 0), store)
    state = ServerState(params={"w": torch.zeros(1)}, stage="train")
    loop.run_round(state, method.stages[0])
    assert [cid for cid, _ in method.seen] == [0, 1, 2]
    assert all(ins == {"phase": "main", "sum": 2} for _, ins in method.seen)
    assert all(store.get(c) == {} for c in range(3))


def test_plan_without_probe_never_calls_probe_hooks():
    method = ProbeThenTrain()
    method.plan_round = lambda state, rnd: RoundPlan(stage=state.stage)
    method.client_probe = None  # would raise if called
    loop = RoundLoop(method, SimpleNamespace(seed=0, clients=[object()] * 2), ClientSampler(2, 1.0, 0),
                     ClientStateStore(2))
    loop.run_round(ServerState(params={}, stage="train"), method.stages[0])
    assert [cid for cid, _ in method.seen] == [0, 1]
