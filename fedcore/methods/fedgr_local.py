"""FedGR's local objective, sequential and batched (the `fedcore.methods.fedgr` client step).

"Learning Locally, Revising Globally: Global Reviser for Federated Learning with Noisy
Labels." ICML 2026, arXiv:2412.00452. Spec: /work/shared/spec/fedgr.md (v2).

L = L_SR(student view) + lambda_B KL(teacher/T || student/T) + lambda_R KL(f_g(weak)/T' || f_k(student)/T'),
with the teacher's weak-view logits computed once per visit, and the client's EMA model
stepped towards the student after every optimizer step. Each hook below has its batched
twin (`fedcore.engine.batched`), so the engine can train a cohort's main phase as one
stacked computation; both live in this mixin because the engine only trusts a twin
defined beside the hook it replaces. The batched form computes the same per-sample terms;
only the order of a few sums differs (float rounding). The v1 cosine R (`rep_loss: cosine`,
features over the weak and student views together) has no batched form and trains
sequentially.

The mixin reads what `FedGR` sets up: `params`, `views`, `alpha`, `augmenter()`, `_weak()`,
`global_model` (w^t) and `ema_model`.
"""

from __future__ import annotations

from typing import Any

import torch

from fedcore.train import losses
from fedcore.train.ema import ema_step_, ramped_decay, ramped_weights, stacked_ema_update
from fedcore.train.refine import batch_soft_targets, weighted_soft_ce


class FedGRLocal:
    """FedGR's local step: `make_x`, `loss`, `after_step` and their batched twins."""

    # -- views -------------------------------------------------------------------------------
    def _view_plan(self, task) -> tuple[bool, bool]:
        """(student on the strong view, a separate weak view for R's global side) this round."""
        p, warm = self.params, task.rnd < self.alpha
        strong = self.views == "strong" and not (warm and p.warmup_view != "student")
        return strong, strong and p.rep_reg and (p.warmup_rep_reg or not warm)

    def _plain_student(self, task) -> bool:
        """The warm-up student on the un-augmented image (warmup_view=plain: FedAvg's warm-up)."""
        return task.rnd < self.alpha and self.params.warmup_view == "plain"

    def make_x(self, task):
        data = task.data
        strong, with_weak = self._view_plan(task)
        plain = self._plain_student(task)

        def views(pos: torch.Tensor) -> torch.Tensor:
            x01 = data.x01(pos)
            if plain:
                return data.store.normalize(x01)
            view = self.augmenter().strong(x01, task.gen) if strong else self._weak(x01, task.gen)
            student = data.store.normalize(view)
            return torch.cat([data.store.normalize(self._weak(x01, task.gen)), student]) if with_weak else student

        return views

    # -- sequential step -----------------------------------------------------------------------
    def loss_terms(self, model, batch, extras: dict[str, Any]) -> dict[str, torch.Tensor]:
        """The unweighted terms of the local objective on one batch: sr, and b / r when active.

        batch.x is the student's view (B, ...) or [weak; student] (2B, ...) when R needs a
        separate weak view for the global side.
        """
        p, pos, warm = self.params, batch.pos, extras["warmup"]
        b = len(pos)
        z = model.features(batch.x if p.rep_loss == "cosine" else batch.x[-b:])
        logits = model.head(z[-b:])
        if warm:
            terms = {"sr": losses.ce(logits, batch.y)}
        else:
            targets, weights = extras["targets"][pos], extras["weights"][pos]
            if "soft_batch" in extras:  # soft_q=batch: the batch's mean posterior for every sample
                q, ref, missing, soften = extras["soft_batch"]
                targets, weights = batch_soft_targets(batch.y, q[pos], ref[pos], targets.shape[1], missing, soften)
            terms = {"sr": weighted_soft_ce(logits, targets, weights)}
        if not warm and p.ema_distill:
            per = losses.kd_kl(logits, extras["teacher"][pos], T=p.tau, reduction="none")
            if "b_weight" in extras:  # divided by the whole batch, as the refined CE is
                per = per * extras["b_weight"][pos].to(per.dtype)
            terms["b"] = per.mean()
        if p.rep_reg and (p.warmup_rep_reg or not warm):
            with torch.no_grad():
                f_global = self.global_model.features(batch.x[:b])
            terms["r"] = (losses.cosine_repr_reg(z[:b], f_global) if p.rep_loss == "cosine"
                          else losses.kd_kl(z[-b:], f_global, T=p.rep_tau))
        return terms

    def loss(self, model, batch, task, extras):
        terms = self.loss_terms(model, batch, extras)
        sums = extras["sums"]
        for name, value in terms.items():
            sums[name] = sums.get(name, 0.0) + value.detach()
        sums["steps"] = sums.get("steps", 0) + 1
        return self._weighted_sum(terms, extras.get("lambda_b", self.params.lambda_b))

    def _weighted_sum(self, terms: dict[str, torch.Tensor], lambda_b: float) -> torch.Tensor:
        """L = sr + lambda_B b + lambda_R r over the active terms (per batch or per sample);
        lambda_B is this round's (`fedgr_diag.lambda_b_at`: ramped after the warm-up or not)."""
        weights = {"sr": 1.0, "b": lambda_b, "r": self.params.lambda_r}
        return sum(weights[name] * value for name, value in terms.items())

    def _ema_start_step(self, task) -> int:
        return task.state.get("steps", 0) if self.params.ema_ramp == "lifetime" else 0

    def after_step(self, task, extras):
        p = self.params
        if extras["warmup"] or not p.ema_distill:
            return None
        step = [self._ema_start_step(task)]

        def update(model: torch.nn.Module) -> None:
            decay = p.gamma_l if p.ema_ramp == "off" else ramped_decay(step[0], p.gamma_l)
            ema_step_(self.ema_model, model, decay)
            step[0] += 1

        return update

    # -- batched twins -------------------------------------------------------------------------
    def batched_support(self) -> str | None:
        if self.params.rep_loss == "cosine":
            return "its v1 representation term (rep_loss: cosine) reads the features of both views at once"
        if self.params.soft_q == "batch":
            return "soft_q: batch (the authors' broadcast) weighs each batch by its mean posterior"
        return super().batched_support()

    def batched_static(self, task, extras) -> dict[str, Any]:
        p, warm = self.params, extras["warmup"]
        return {"warm": warm, "distill": not warm and p.ema_distill, "weighted": "b_weight" in extras,
                "lambda_b": extras.get("lambda_b", p.lambda_b),
                "rep": p.rep_reg and (p.warmup_rep_reg or not warm), "with_weak": self._view_plan(task)[1]}

    def batched_samples(self, task, extras) -> dict[str, torch.Tensor]:
        if extras["warmup"]:
            return {}
        out = {"targets": extras["targets"], "weights": extras["weights"]}
        out.update({k: extras[k] for k in ("teacher", "b_weight") if k in extras})
        return out

    def batched_consts(self, task, extras) -> dict[str, Any]:
        if "ema_start" not in extras:
            return {}
        dev = extras["labels"].device
        return {"ema": extras["ema_start"],
                "ema_step": torch.tensor(float(self._ema_start_step(task)), dtype=torch.float64, device=dev)}

    def batched_inputs(self, task, extras):
        views, with_weak = self.make_x(task), self._view_plan(task)[1]

        def inputs(pos: torch.Tensor) -> dict[str, torch.Tensor]:
            x = views(pos)
            return {"x": x[len(pos):], "xw": x[:len(pos)]} if with_weak else {"x": x}

        return inputs

    def batched_loss(self, step):
        p, st = self.params, step.static
        z = step.net.features(step.params, step.batch["x"])
        logits = step.net.head(step.params, z)
        flat = step.flat
        if st["warm"]:
            sr = losses.ce_stacked(logits, step.batch["y"]).reshape(-1)
        else:
            w = flat(step.batch["weights"])
            sr = losses.soft_ce(flat(logits), flat(step.batch["targets"]), reduction="none") * w.to(logits.dtype)
        terms = {"sr": sr}
        if st["distill"]:
            b = losses.kd_kl(flat(logits), flat(step.batch["teacher"]), T=p.tau, reduction="none")
            terms["b"] = b * flat(step.batch["b_weight"]).to(b.dtype) if st["weighted"] else b
        if st["rep"]:
            with torch.no_grad():  # w^t is every client's start: f_g on the weak view (the student's without one)
                f_global = step.net.features(step.start, step.batch["xw" if st["with_weak"] else "x"])
            terms["r"] = losses.kd_kl(flat(z), flat(f_global), T=p.rep_tau, reduction="none")
        return self._weighted_sum(terms, st["lambda_b"]), {f"fedgr/loss_{name}": value.detach()
                                                           for name, value in terms.items()}

    def batched_after_step(self, task, extras):
        return self._batched_ema_step if "ema_start" in extras else None

    def _batched_ema_step(self, params, consts, static) -> dict[str, Any]:
        """Every row's EMA model one step towards its student (`ema_step_`, row by row)."""
        p, s = self.params, consts["ema_step"]
        w = ramped_weights(s, p.gamma_l, p.ema_ramp != "off").to(torch.float32)
        return {"ema": stacked_ema_update(consts["ema"], params, w), "ema_step": s + 1}

    def finish_local(self, task, extras, params, stats):
        if params is not None:  # batched: the step count and the EMA come from the stack
            extras = {**extras, "batched_steps": int(stats["train/steps"])}
        return super().finish_local(task, extras, params, stats)
