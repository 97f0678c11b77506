"""config_diff: the keys two configs differ in, named for a user (issue 53, defect 6)."""

from __future__ import annotations

from fedcore.reporting.config_diff import config_diff, describe_diff, resume_mismatch


def test_nested_keys_are_dotted_and_sorted():
    before = {"method": {"name": "fedprox", "params": {"mu": 0.01}}, "train": {"lr": 0.05, "rounds": 30}, "seed": 0}
    after = {"method": {"name": "fedavg", "params": {}}, "train": {"lr": 0.1, "rounds": 30}, "seed": 0}
    assert config_diff(before, after) == [("method.name", "fedprox", "fedavg"), ("method.params.mu", 0.01, None),
                                          ("train.lr", 0.05, 0.1)]


def test_equal_configs_have_no_difference():
    cfg = {"a": {"b": [1, 2]}, "c": None}
    assert config_diff(cfg, cfg) == [] and describe_diff(cfg, cfg) == "no key differs"


def test_description_names_both_sides_and_counts_the_rest():
    before = {"method": {"name": "fedprox"}, "a": 1, "b": True, "c": [1, 2], "d": None}
    after = {"method": {"name": "fedavg"}, "a": 2, "b": False, "c": [1, 3], "d": "x"}
    assert describe_diff(before, after, "run", limit=3) == \
        "a: 1 (run) vs 2; b: true (run) vs false; c: [1, 2] (run) vs [1, 3]; and 2 more (d, method.name)"
    assert describe_diff({"method": {"name": "fedprox"}}, {"method": {"name": "fedavg"}}, "run") == \
        "method.name: fedprox (run) vs fedavg"


def test_a_key_only_one_side_has_reads_unset():
    assert describe_diff({"x": {"y": 1}}, {}, "tune") == "x.y: 1 (tune) vs unset"


def test_a_checkpoint_without_a_recorded_config_says_so():
    assert resume_mismatch(None, {"a": 1}).startswith("it predates checkpoints that record their config")
    assert resume_mismatch({"a": 1}, {"a": 2}) == "a: 1 (run) vs 2"


def test_a_key_one_side_leaves_at_its_default_is_no_difference():
    # Issue 71: a resume_dict leaves data.validation out at its default; the run that set only the
    # fraction differs in the fraction, not in server_clean (0 both ways).
    from fedcore.config_parse import parse_config_dict

    run = parse_config_dict({}, ["data.validation.fraction=0.1"]).resume_dict()
    now = parse_config_dict({}).resume_dict()
    assert resume_mismatch(run, now) == "data.validation.fraction: 0.1 (run) vs 0.0"
    assert config_diff({"a": {"b": 0}}, {}, defaults={"a": {"b": 0}}) == []
    assert config_diff({"a": {"b": 1}}, {}, defaults={"a": {"b": 0}}) == [("a.b", 1, 0)]
