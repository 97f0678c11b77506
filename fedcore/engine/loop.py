"""The round loop: drives any method through its stages without knowing which method it is."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from fedcore.engine.callbacks import Callback
from fedcore.engine.executor import Executor, SequentialExecutor
from fedcore.engine.sampler import ClientSampler, client_rngs
from fedcore.engine.store import ClientStateStore, plain_state
from fedcore.engine.types import ClientTask, ClientUpdate, Estimates, Method, RunContext, ServerState, Stage
from fedcore.errors import DivergedError

# The window of final/acc_last10 (fedcore.metrics.classification.summarize_history): with train.eval_every > 1
# a stage's last LAST_WINDOW rounds are still all evaluated.
LAST_WINDOW = 10
PERSONAL = "__personal__"  # engine-owned key in client state: parameters that are never aggregated

Evaluator = Callable[[torch.nn.Module, int], dict[str, float]]
Scorer = Callable[[Estimates, int], dict[str, float]]
# (model for a client's uploaded params, the round's updates) -> metrics; see metrics.scoring
ClientScorer = Callable[[Callable[[Any], torch.nn.Module], Sequence[ClientUpdate]], dict[str, float]]


@dataclass
class LoopState:
    """Everything besides the server state that a checkpoint must restore."""

    stage_index: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    stopped: bool = False
    extras: dict[str, Any] = field(default_factory=dict)  # latest Estimates.extra per key (run artifacts)


class RoundLoop:
    def __init__(
        self,
        method: Method,
        ctx: RunContext,
        sampler: ClientSampler,
        clients_state: ClientStateStore,
        callbacks: Sequence[Callback] = (),
        evaluator: Evaluator | None = None,
        scorer: Scorer | None = None,
        eval_every: int = 1,
        checkpoint: Callable[[ServerState, LoopState, str], Any] | None = None,
        checkpoint_every: int = 0,
        executor: Executor | None = None,
        client_scorer: ClientScorer | None = None,
    ) -> None:
        self.method, self.ctx, self.sampler = method, ctx, sampler
        self.store = clients_state
        self.callbacks = list(callbacks)
        self.evaluator, self.scorer = evaluator, scorer
        self.eval_every, self.checkpoint_every = eval_every, checkpoint_every
        self.checkpoint = checkpoint
        self.executor = executor or SequentialExecutor()
        self.client_scorer = client_scorer

    # -- one round --------------------------------------------------------------------------
    def _tasks(self, state: ServerState, cohort: Sequence[int], instructions: Any) -> list[ClientTask]:
        tasks = []
        for cid in cohort:
            cstate = self.store.get(cid)
            personal = cstate.get(PERSONAL)
            params = {**state.params, **personal} if personal else state.params
            rng, gen = client_rngs(self.ctx.seed, state.rnd, cid)
            tasks.append(ClientTask(
                cid=cid, params=params, data=self.ctx.clients[cid], instructions=instructions,
                state={k: v for k, v in cstate.items() if k != PERSONAL}, rng=rng, gen=gen,
                rnd=state.rnd, stage=state.stage,
            ))
        return tasks

    def _keep_client_state(self, updates: Sequence[ClientUpdate]) -> None:
        prefixes = tuple(self.method.personal_keys)
        for u in updates:
            old = self.store.get(u.cid)
            new = dict(old if u.state is None else plain_state(u.state))  # a method's dataclass: its fields
            if prefixes and u.params is not None:
                # Copies: an update's tensors may be views into a larger buffer (a batched stack).
                new[PERSONAL] = {k: v.clone() for k, v in u.params.items() if k.startswith(prefixes)}
            elif PERSONAL in old:
                new[PERSONAL] = old[PERSONAL]
            self.store.put(u.cid, new)

    def run_round(
        self, state: ServerState, stage: Stage
    ) -> tuple[ServerState, dict[str, float], dict[str, Any]] | None:
        plan = self.method.plan_round(state, state.rnd)
        if plan is None:
            return None
        if plan.probe:
            answers = self.executor.map(self.method.client_probe, self._tasks(state, plan.probe, plan.instructions))
            plan = self.method.after_probe(state, plan, answers)
        if plan.cohort is not None:
            cohort = list(plan.cohort)
        elif stage.cohort == "all":
            cohort = list(range(len(self.ctx.clients)))
        else:
            cohort = self.sampler.sample(state.rnd)
        updates = self.executor.run_clients(self.method, self._tasks(state, cohort, plan.instructions))
        self._keep_client_state(updates)
        state, result = self.method.server_update(state, plan, updates)
        check_finite(state.params, updates, state.rnd + 1)
        state = state.replace(rnd=state.rnd + 1, stage_round=state.stage_round + 1)
        self.executor.agree(state.params, state.rnd)
        metrics = {**_client_means(updates), **result.scalars, "round/clients": float(len(cohort))}
        if self.scorer is not None and not result.estimates.empty():
            metrics.update(self.scorer(result.estimates, state.rnd))
        if self.client_scorer is not None:
            # The method's own eval model, loaded with each client's params; then back to the global ones.
            metrics.update(self.client_scorer(lambda p: self.method.eval_model(state.replace(params=p)), updates))
            self.method.eval_model(state)
        return state, metrics, result.estimates.extra

    # -- stages -----------------------------------------------------------------------------
    def run(self, state: ServerState, loop: LoopState, only: Sequence[str] | None = None) -> ServerState:
        stages = self.method.stages
        i = loop.stage_index
        if 0 < i <= len(stages) and not loop.stopped and stages[i - 1].name == state.stage \
                and state.stage_round < stages[i - 1].rounds:
            # Resumed with a grown round budget: the stage the checkpoint closed has rounds left.
            # (A stage its method ended early is re-entered too; its plan ends it again at once.)
            loop.stage_index = i - 1
        while loop.stage_index < len(stages) and not loop.stopped:
            stage = stages[loop.stage_index]
            if only is not None and stage.name not in only:
                loop.stage_index += 1
                continue
            if state.stage != stage.name:
                state = state.replace(stage=stage.name, stage_round=0)
            state = self._run_stage(state, stage, loop)
            loop.stage_index += 1
            path = self.checkpoint(state, loop, f"stage-{stage.name}") if self.checkpoint else None
            for cb in self.callbacks:
                cb.on_stage_end(stage.name, state.rnd, path)
        return state

    def _extra_scores(self, state: ServerState) -> dict[str, float]:
        """Test scores of the extra models a method exposes (`extra_eval_models`, e.g. a teacher),
        as `<name>/<score>`; a diagnosis only, never fed back to the method."""
        models = getattr(self.method, "extra_eval_models", _no_extra)(state)
        score = getattr(self.evaluator, "test_scores", None)
        if not models or score is None:
            return {}
        return {f"{name}/{k}": v for name, model in models.items() for k, v in score(model).items()}

    def _run_stage(self, state: ServerState, stage: Stage, loop: LoopState) -> ServerState:
        last_eval = -1
        while state.stage_round < stage.rounds:
            out = self.run_round(state, stage)
            if out is None:
                break
            state, metrics, extra = out
            loop.extras.update(extra)
            final = state.stage_round >= stage.rounds
            # Every eval_every-th round, and every one of a stage's last LAST_WINDOW rounds: final/acc and
            # final/acc_last10 then mean what they mean at eval_every 1 (the best round is the best evaluated).
            tail = stage.rounds - state.stage_round < LAST_WINDOW
            if stage.evaluate and self.evaluator and (state.rnd % self.eval_every == 0 or final or tail):
                metrics.update(self._extra_scores(state))  # first: the evaluator's `last` stays the global model's
                metrics.update(self.evaluator(self.method.eval_model(state), state.rnd))
                last_eval = state.rnd
            metrics = {"round": float(state.rnd), **metrics}
            loop.history.append({"stage": stage.name, **metrics})
            for cb in self.callbacks:
                cb.after_round(state.rnd, stage.name, metrics)
            loop.stopped = any(cb.should_stop() for cb in self.callbacks)
            if self.checkpoint and self.checkpoint_every and state.rnd % self.checkpoint_every == 0:
                self.checkpoint(state, loop, "latest")
            if loop.stopped:
                break
        if stage.evaluate and self.evaluator and loop.history and last_eval != state.rnd and state.stage_round:
            # The stage ended early (method or early stop): make sure its last round is scored.
            loop.history[-1].update(self.evaluator(self.method.eval_model(state), state.rnd))
        return state


def _no_extra(state: ServerState) -> dict[str, Any]:
    return {}


def nonfinite(params: Any) -> list[str]:
    """Names of the floating-point tensors in a parameter dict that hold a NaN or an inf."""
    if not isinstance(params, dict):
        return []
    return [k for k, v in params.items()
            if isinstance(v, torch.Tensor) and v.is_floating_point() and not bool(torch.isfinite(v).all())]


def check_finite(params: Any, updates: Sequence[ClientUpdate], rnd: int) -> None:
    """Stop a run whose global model went non-finite. Without this a diverged client's NaN
    spreads through the average and the run goes on for its remaining rounds at chance accuracy,
    a number that reads like a result (seen on Fashion-MNIST: clean labels, Dirichlet 0.1)."""
    bad = nonfinite(params)
    if not bad:
        return
    clients = [u.cid for u in updates if u.params is not None and nonfinite(u.params)]
    who = f"client(s) {', '.join(map(str, clients))} returned NaN/inf parameters" if clients else \
        f"the aggregate has NaN/inf in {', '.join(bad[:3])}"
    raise DivergedError(
        f"training diverged in round {rnd}: {who}; lower train.lr or train.momentum (or train fewer "
        "local epochs) and run again; checkpoints of earlier stages are kept")


def _client_means(updates: Sequence[ClientUpdate]) -> dict[str, float]:
    """Sample-weighted means of the clients' own metrics (e.g. train/loss)."""
    totals: dict[str, float] = {}
    weights: dict[str, float] = {}
    for u in updates:
        for k, v in u.metrics.items():
            totals[k] = totals.get(k, 0.0) + float(v) * u.num_examples
            weights[k] = weights.get(k, 0.0) + u.num_examples
    return {k: totals[k] / weights[k] for k in totals if weights[k] > 0}
