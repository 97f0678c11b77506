"""FedCorr: multi-stage federated learning for label-noise correction.

Xu, Chen, Quek, Chong. "FedCorr: Multi-Stage Federated Learning for Label Noise
Correction." CVPR 2022, arXiv:2204.04677. Spec: shared/spec/baselines-and-metrics.md.

Stages:
1. `preprocess`: `iterations` passes; each pass visits every client once, in a fresh
   random order, `preprocess_clients` per round (the public code's frac1 = 1 client), so
   clients train one after another on the latest global model. A client trains with mixup
   plus the adaptive proximal term beta * level_k * ||w - w_g|| (level_k: its estimated
   noise level, 0 until it is judged noisy), then scores its own data with the trained
   local model: the mean LID of its softmax outputs goes to the server, the per-sample CE
   stays in its state. After each pass the server fits a 2-component GMM on every client's
   LID summed over the passes so far (higher mean = noisy clients). At its next visit a
   noisy client fits a GMM on its stored losses (level = share of the high-loss side) and
   relabels the `relabel_ratio` * level * n highest-loss samples to the prediction of the
   end-of-pass global model where that model's confidence exceeds `confidence_thres`.
2. `finetune`: FedAvg (with mixup, no proximal term) over the clients whose estimated level
   is at most `clean_set_thres` (noisy-judged clients report their level in a probe).
3. `train`: usual FedAvg over all clients. At its first visit each noisy client relabels
   every sample on which the fine-tuned model is confident.

Choices and departures (facts read from the public code, github Xu-Jingyi/FedCorr):
- Per-sample losses are CE on the logits (the code applies CE to softmax outputs).
- A relabel decided at the end of a pass runs at the client's next visit (in this engine
  only a client writes its own labels); the model it uses is the end-of-pass snapshot.
- The proximal term is the unsquared norm, as in the code (beta = 5 in its README).
- The three stages fit inside train.rounds (`budget: within`, see `stage_split`:
  pre-processing takes `preprocess_share` of it in whole passes, at least one pass where the
  budget holds one, fine-tuning half the rest),
  so FedCorr gets every other method's budget; `budget: extra` puts `iterations` passes on top
  (the former behaviour). With preprocess_clients=1 a pre-processing round's global model is one
  client's local model: on a federation where clients hold 1-3 classes it sits near chance
  until fine-tuning averages clients again (lab/results/baselines.md has the per-round trace).
- If no client passes `clean_set_thres`, the lowest-level client fine-tunes alone.
- The server keeps each client's latest working labels, loss-GMM flags and level only to
  report relabel and detection metrics; no decision reads them.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field

from fedcore.config import tune_range
from fedcore.engine.store import plain_state
from fedcore.engine.types import ClientTask, ClientUpdate, Estimates, RoundMetrics, RoundPlan, ServerState, Stage
from fedcore.errors import ConfigError
from fedcore.methods.base import StagedMethod
from fedcore.methods.registry import MethodParams, register
from fedcore.stats.gmm import clean_posterior, noisy_fraction
from fedcore.stats.lid import lid_mle
from fedcore.train import losses
from fedcore.train.local import predict_client
from fedcore.train.params import load_params_

log = logging.getLogger(__name__)

_ORDER_SALT, _PICK_SALT = 0xC0A1, 0xC0A2


class FedCorrParams(MethodParams):
    budget: Literal["within", "extra"] = Field(
        "within", description="the stages share train.rounds, or pre-processing comes on top (former)")
    preprocess_share: float = Field(0.4, ge=0.0, lt=1.0, description="within: pre-processing's share of train.rounds")
    iterations: int = Field(5, ge=1, description="T1: pre-processing passes over all clients (at most, within)")
    preprocess_clients: int = Field(1, ge=1, description="clients per pre-processing round (code: frac1*N = 1)")
    finetune_rounds: int | None = Field(None, ge=0, description="default: half of the rounds after pre-processing")
    beta: float = Field(5.0, ge=0.0, description="adaptive proximal weight (times the level)",
                        json_schema_extra=tune_range(0.5, 10.0, log=True))
    lid_k: int = Field(20, ge=1, description="neighbours of the LID estimate")
    relabel_ratio: float = Field(0.5, ge=0.0, le=1.0, description="share of a noisy client's high-loss set to relabel",
                                 json_schema_extra=tune_range(0.2, 0.8))
    confidence_thres: float = Field(0.5, ge=0.0, le=1.0, description="relabel only above this confidence")
    clean_set_thres: float = Field(0.1, ge=0.0, le=1.0, description="level at most this: fine-tune on the client")
    fine_tuning: bool = Field(True, description="False: no finetune stage (and no relabel after it)")
    correction: bool = Field(True, description="False: never relabel")
    mixup_alpha: float = Field(1.0, ge=0.0, description="Beta(alpha, alpha) mixup; 0 = no mixup")


def adaptive_proximal(params: Sequence[torch.Tensor], anchors: Sequence[torch.Tensor], weight: float) -> torch.Tensor:
    """weight * ||w - w_g|| over all tensors (not squared, as FedCorr's code)."""
    diffs = torch.cat([(p - a).reshape(-1) for p, a in zip(params, anchors, strict=True)])
    return weight * torch.linalg.vector_norm(diffs)


def loss_level(loss: np.ndarray, seed: int) -> tuple[float, np.ndarray]:
    """A noisy client's noise level from its per-sample losses: (share on the high-loss side, flags)."""
    q, _ = clean_posterior(np.asarray(loss, dtype=float), seed=seed)
    return noisy_fraction(q, "threshold"), q < 0.5


def loss_relabel(labels: np.ndarray, loss: np.ndarray, probs: np.ndarray, level: float, ratio: float,
                 thres: float) -> np.ndarray:
    """Pre-processing correction: the int(n * level * ratio) highest-loss samples take the
    model's prediction where its confidence (max prob) exceeds `thres`. -> new labels (n,)."""
    out = np.array(labels, copy=True)
    top = np.argsort(-np.asarray(loss), kind="stable")[: int(len(out) * level * ratio)]
    top = top[probs[top].max(axis=1) > thres]
    out[top] = probs[top].argmax(axis=1)
    return out


def confident_relabel(labels: np.ndarray, probs: np.ndarray, thres: float) -> np.ndarray:
    """Post-fine-tuning correction: every sample with confidence above `thres` takes the prediction."""
    sure = probs.max(axis=1) > thres
    return np.where(sure, probs.argmax(axis=1), labels)


def stage_split(total: int, per_pass: int, iterations: int, budget: str, preprocess_share: float,
                finetune_rounds: int | None, fine_tuning: bool) -> tuple[int, int, int]:
    """(preprocess, finetune, train) rounds.

    budget "within": the three stages share `total` (train.rounds), so FedCorr gets the budget of
    every other method. Pre-processing takes preprocess_share * total rounds, rounded down to whole
    passes of `per_pass` rounds (the server judges the clients at the end of each pass), but at most
    `iterations` passes; when the share is under one pass it takes one whole pass if the budget
    holds it with a round to spare, because a partial pass never judges a client and FedCorr would
    then run as FedAvg without saying so (20 clients in 40 rounds did). Fine-tuning takes
    `finetune_rounds` (default: half of what is left); usual training the rest. Tiny budgets shrink
    the stages instead of being refused: usual training keeps at least 1 round, then
    pre-processing 1 when total >= 2 (a partial pass: `judges` says whether a pass completes), then
    fine-tuning gets what is left (possibly 0).
    budget "extra" (the former behaviour): `iterations` whole passes on top of total, which
    fine-tuning (default half) and usual training share.
    """
    if budget == "extra":
        pre = iterations * per_pass
        ft = (total // 2 if finetune_rounds is None else finetune_rounds) if fine_tuning else 0
        return pre, ft, max(total - ft, 1)
    pre = int(preprocess_share * total)
    if pre >= per_pass:
        pre = min(pre // per_pass, iterations) * per_pass
    elif preprocess_share > 0 and iterations >= 1 and per_pass <= total - 1:
        pre = per_pass
    pre = max(0, min(pre, total - 1, iterations * per_pass))
    if total >= 2 and preprocess_share > 0:
        pre = max(pre, 1)
    left = total - pre
    ft = (left // 2 if finetune_rounds is None else finetune_rounds) if fine_tuning else 0
    ft = max(0, min(ft, left - 1))
    return pre, ft, max(left - ft, 1)


def judges(preprocess_rounds: int, per_pass: int) -> bool:
    """Whether pre-processing completes a pass, the point where the server identifies noisy clients."""
    return per_pass > 0 and preprocess_rounds >= per_pass


@dataclass
class FedCorrState:
    """One client's FedCorr state across its visits."""

    loss: np.ndarray | None = None  # (n,) CE of its last pre-processing model on its labels
    loss_level: tuple[float, np.ndarray] | None = None  # the fit on `loss`: (level, flags (n,))
    level: float = 0.0  # estimated noise level (0 when judged clean); scales the proximal term
    relabeled_pass: int = -1  # the last pass whose snapshot relabeled this client
    ft_relabeled: bool = False  # relabeled from the fine-tuned model already
    labels: torch.Tensor | None = None  # (n,) working labels; None: the given ones


@dataclass(frozen=True)
class FedCorrInstructions:
    """What every client of a round is told."""

    noisy: frozenset[int] = frozenset()  # the clients judged noisy at the end of the last pass
    snapshot: dict[str, Any] | None = None  # {"pass", "params"}: the global model at that pass's end
    prox: bool = False  # pre-processing: the adaptive proximal term is on
    selected: list[int] | None = None  # fine-tuning: the clients under clean_set_thres
    levels: dict[int, float] | None = None  # fine-tuning's first round: every client's level
    ft_snapshot: dict[str, torch.Tensor] | None = None  # usual training: the fine-tuned model


@dataclass
class FedCorrUpload:
    """A visit's report (each field only where it applies) or a probe's noise level."""

    level: float | None = None
    flags: np.ndarray | None = None  # (n,) bool: the samples the level's fit flags
    labels: np.ndarray | None = None  # (n,) working labels after this visit's relabels
    lid: float | None = None  # pre-processing: mean LID of the trained local model's outputs


@register("fedcorr", params=FedCorrParams)
class FedCorr(StagedMethod):
    client_state_type = FedCorrState

    # -- stages and plans --------------------------------------------------------------------
    def init(self, ctx):
        if ctx.task == "multi":
            raise ConfigError("method 'fedcorr' is single-label; use fedavg/fedprox/fedharmony for multi-label")
        if len(ctx.clients) != self.cfg.partition.num_clients:
            raise ConfigError(f"fedcorr plans its passes for partition.num_clients={self.cfg.partition.num_clients} "
                              f"but the data has {len(ctx.clients)} clients; set partition.num_clients to match")
        state = super().init(ctx)
        self.snapshot = self.build_model().to(ctx.device).eval()
        pre = next((s.rounds for s in self.stages if s.name == "preprocess"), 0)
        if not judges(pre, self.per_pass):
            log.warning("warning: fedcorr pre-processes %d round(s), under one pass of %d: no client will be judged "
                        "noisy and FedCorr runs as FedAvg; give train.rounds (or preprocess_clients) room for a "
                        "pass", pre, self.per_pass)
        return state

    @property
    def per_pass(self) -> int:
        # from the config, not ctx: the stage budgets are read before init (progress bars, pipelines)
        return math.ceil(self.cfg.partition.num_clients / self.params.preprocess_clients)

    @property
    def stages(self) -> tuple[Stage, ...]:
        p = self.params
        pre, ft, rest = stage_split(self.cfg.train.rounds, self.per_pass, p.iterations, p.budget, p.preprocess_share,
                                    p.finetune_rounds, p.fine_tuning)
        ft = self.stage_rounds("finetune", ft) if p.fine_tuning else 0
        # Its task publishes the identification and the relabeling. With one client a round its
        # global model is that client's local model, not yet a federated one (comparable=False).
        pre = Stage("preprocess", self.stage_rounds("preprocess", pre), yields=("verdicts", "labels"),
                    comparable=p.preprocess_clients > 1)
        stages = (pre, Stage("finetune", ft), Stage("train", self.stage_rounds("train", rest)))
        return tuple(s for s in stages if s.rounds or s.name == "train")

    def plan_round(self, state: ServerState, rnd: int) -> RoundPlan | None:
        x = state.extra
        ins = FedCorrInstructions(noisy=frozenset(x.get("noisy", ())), snapshot=x.get("snapshot"))
        if state.stage == "preprocess":
            it, j = divmod(state.stage_round, self.per_pass)
            order = np.random.default_rng([self.ctx.seed, _ORDER_SALT, it]).permutation(len(self.ctx.clients))
            m = self.params.preprocess_clients
            return RoundPlan(stage=state.stage, cohort=sorted(int(c) for c in order[j * m:(j + 1) * m]),
                             instructions=dataclasses.replace(ins, prox=True))
        if state.stage == "finetune":
            if "selected" in x:
                return RoundPlan(stage=state.stage, cohort=self._pick(x["selected"], rnd), instructions=ins)
            if ins.noisy:  # first fine-tuning round: noisy clients report their levels
                return RoundPlan(stage=state.stage, probe=sorted(ins.noisy), instructions=ins)
            return self.after_probe(state, RoundPlan(stage=state.stage, instructions=ins), [])
        if self.params.fine_tuning and "ft_snapshot" in x:
            ins = dataclasses.replace(ins, ft_snapshot=x["ft_snapshot"])
        return RoundPlan(stage=state.stage, instructions=ins)

    def _pick(self, selected: Sequence[int], rnd: int) -> list[int]:
        m = max(1, int(round(self.cfg.train.client_fraction * len(self.ctx.clients))))
        rng = np.random.default_rng([self.ctx.seed, _PICK_SALT, rnd])
        return sorted(int(c) for c in rng.choice(selected, size=min(m, len(selected)), replace=False))

    def client_probe(self, task: ClientTask) -> ClientUpdate:
        st = self.client_state(task)
        level = self._level(st)[0] if st.loss is not None else 0.0
        return ClientUpdate(cid=task.cid, num_examples=task.data.n, uploads=FedCorrUpload(level=level))

    def after_probe(self, state, plan, answers) -> RoundPlan:
        levels = {c: 0.0 for c in range(len(self.ctx.clients))} | {a.cid: a.uploads.level for a in answers}
        selected = [c for c, v in levels.items() if v <= self.params.clean_set_thres]
        selected = selected or [min(levels, key=levels.get)]
        ins = dataclasses.replace(plan.instructions, selected=selected, levels=levels)
        return RoundPlan(stage=plan.stage, cohort=self._pick(selected, state.rnd), instructions=ins)

    # -- clients -----------------------------------------------------------------------------
    def _level(self, st: FedCorrState) -> tuple[float, np.ndarray]:
        """Level and flags from the stored losses, fitted once per stored loss vector (the losses
        only change in pre-processing, so later visits reuse the fit)."""
        return st.loss_level if st.loss_level is not None else loss_level(st.loss, seed=self.ctx.seed)

    def _probs(self, params, task: ClientTask) -> np.ndarray:
        load_params_(self.snapshot, params)
        return F.softmax(predict_client(self.snapshot, task.data), dim=-1).cpu().numpy()

    def _correct(self, task: ClientTask, st: FedCorrState) -> FedCorrUpload:
        """Pending relabels for a noisy client; updates `st`, returns what to report."""
        ins, p = task.instructions, self.params
        if task.cid not in ins.noisy or st.loss is None:
            st.level = 0.0
            if st.loss is not None:  # judged clean: level 0, nothing flagged, labels as they are
                return FedCorrUpload(level=0.0, flags=np.zeros(task.data.n, dtype=bool),
                                     labels=self.targets(task).cpu().numpy())
            return FedCorrUpload()
        level, flags = self._level(st)
        st.level, st.loss_level = level, (level, flags)
        labels = self.targets(task).cpu().numpy()
        snap = ins.snapshot
        if p.correction and snap is not None and st.relabeled_pass < snap["pass"]:
            labels = loss_relabel(labels, st.loss, self._probs(snap["params"], task), level,
                                  p.relabel_ratio, p.confidence_thres)
            st.relabeled_pass = snap["pass"]
        if p.correction and ins.ft_snapshot is not None and not st.ft_relabeled:
            labels = confident_relabel(labels, self._probs(ins.ft_snapshot, task), p.confidence_thres)
            st.ft_relabeled = True
        st.labels = torch.as_tensor(labels, device=task.data.labels.device)
        return FedCorrUpload(level=level, flags=flags, labels=labels)

    def prepare_local(self, task: ClientTask) -> dict[str, Any]:
        st = self.client_state(task)
        report = self._correct(task, st)
        task.state = plain_state(st)  # the visit trains on its relabels and level (targets, before_local)
        return {"report": report}

    def before_local(self, task: ClientTask) -> dict[str, Any]:
        weight = self.params.beta * self.client_state(task).level if task.instructions.prox else 0.0
        anchors = [task.params[n].detach() for n, _ in self.model.named_parameters()] if weight > 0 else None
        return {"prox": weight, "anchors": anchors}

    def loss(self, model, batch, task, extras) -> torch.Tensor:
        a = self.params.mixup_alpha
        if a <= 0 or len(batch.y) < 2:
            return losses.ce(model(batch.x), batch.y)
        lam = float(task.rng.beta(a, a))
        perm = torch.randperm(len(batch.y), generator=task.gen).to(batch.y.device)
        x, y_b = losses.mixup_inputs(batch.x, batch.y, lam, perm)
        return losses.mixup_ce(model(x), batch.y, y_b, lam)

    def regularizer(self, model, batch, task, extras) -> torch.Tensor:
        if not extras["prox"]:
            return torch.zeros((), device=batch.x.device)
        return adaptive_proximal(list(model.parameters()), extras["anchors"], extras["prox"])

    def after_local(self, task, extras):
        uploads, state = dataclasses.replace(extras["report"]), self.client_state(task)
        if task.stage == "preprocess":  # score the own data with the trained local model
            logits = predict_client(self.model, task.data)
            labels = self.targets(task)
            uploads.lid = float(lid_mle(F.softmax(logits, -1).cpu().numpy(), self.params.lid_k).mean())
            state.loss = F.cross_entropy(logits, labels, reduction="none").cpu().numpy()
            state.loss_level = None  # new losses: the next visit refits
        return uploads, state

    # -- batched twins: mixup draws on the host, per client, in `loss`'s order (lam, 1 - lam as its floats)
    def batched_static(self, task, extras) -> dict[str, Any]:
        return {"mixup": self.params.mixup_alpha > 0 and task.data.n >= 2, "prox": bool(extras["prox"])}

    def batched_consts(self, task, extras) -> dict[str, Any]:
        return {"prox": torch.tensor(extras["prox"], device=extras["labels"].device)} if extras["prox"] else {}

    def batched_inputs(self, task, extras):
        if not self.batched_static(task, extras)["mixup"]:
            return super().batched_inputs(task, extras)
        a, data, labels, make_x = self.params.mixup_alpha, task.data, extras["labels"], self.make_x(task)

        def inputs(pos: torch.Tensor) -> dict[str, torch.Tensor]:
            x, y = (make_x(pos) if make_x is not None else data.x(pos)), labels[pos]
            lam = float(task.rng.beta(a, a))
            perm = torch.randperm(len(y), generator=task.gen).to(y.device)
            x, y_b = losses.mixup_inputs(x, y, lam, perm)
            return {"x": x, "y_b": y_b, "lam": torch.full((len(y),), lam, device=y.device),
                    "lam_b": torch.full((len(y),), 1.0 - lam, device=y.device)}

        return inputs

    def batched_loss(self, step) -> torch.Tensor:
        b = {k: step.flat(v) for k, v in step.batch.items() if k != "x"}
        logits = step.flat(step.net(step.params, step.batch["x"]))
        if not step.static["mixup"]:
            return losses.ce(logits, b["y"], reduction="none")
        return b["lam"] * losses.ce(logits, b["y"], reduction="none") \
            + b["lam_b"] * losses.ce(logits, b["y_b"], reduction="none")

    def batched_regularizer(self, step) -> torch.Tensor | None:
        if not step.static["prox"]:
            return None
        names = [n for n, _ in self.model.named_parameters()]
        diffs = torch.cat([(step.params[n] - step.start[n]).flatten(1) for n in names], 1)  # (K, P)
        return step.consts["prox"] * torch.linalg.vector_norm(diffs, dim=1)  # adaptive_proximal per row

    # -- server --------------------------------------------------------------------------------
    def summarize(self, state, plan, updates, params):
        x = dict(state.extra)
        if plan.instructions.selected is not None:
            x["selected"] = list(plan.instructions.selected)
            x["levels"] = {**x.get("levels", {}), **plan.instructions.levels}
        for key, name in (("level", "levels"), ("flags", "flags"), ("labels", "labels")):
            got = {u.cid: getattr(u.uploads, key) for u in updates if getattr(u.uploads, key) is not None}
            if got:
                x[name] = {**x.get(name, {}), **got}
        scalars: dict[str, float] = {}
        if state.stage == "preprocess":
            lid = {**x.get("lid_cum", {})}
            for u in updates:
                lid[u.cid] = lid.get(u.cid, 0.0) + u.uploads.lid
            x["lid_cum"] = lid
            done, j = divmod(state.stage_round + 1, self.per_pass)
            if j == 0:  # a pass just ended: judge the clients, keep this model for their relabels
                cids = sorted(lid)
                q, _ = clean_posterior(np.array([lid[c] for c in cids]), seed=self.ctx.seed)
                x["noisy"] = [c for c, qc in zip(cids, q, strict=True) if qc < 0.5]
                x["snapshot"] = {"pass": done - 1, "params": params}
                x["verdict"] = {c: bool(qc < 0.5) for c, qc in zip(cids, q, strict=True)}
                scalars["detect/clients_noisy"] = float(len(x["noisy"]))
        elif state.stage == "finetune":
            x["ft_snapshot"] = params
        n = len(self.ctx.clients)  # per-client reports count once every client has one
        whole = {k: dict(x[k]) if len(x.get(k, ())) == n else {} for k in ("levels", "flags", "labels")}
        est = Estimates(client_noisy=dict(x.get("verdict", {})), client_rate=whole["levels"],
                        sample_noisy={"main": whole["flags"]} if whole["flags"] else {}, labels=whole["labels"])
        return x, RoundMetrics(scalars=scalars, estimates=est)
