from dataclasses import replace
from itertools import combinations

import numpy as np
import pytest
import torch

import celldag.methods.celltreeqm.train as ctqm_train
from celldag.data.bm import simulate_bm
from celldag.lineage.metrics import four_point_topology
from celldag.lineage.track import LineageInput
from celldag.lineage.tree import parse_newick, path_distances
from celldag.methods.celltreeqm import run
from celldag.methods.celltreeqm.losses import (
    _masked_additivity,
    additivity_loss,
    distance_preservation_loss,
    embedding_distances,
    pair_sums,
    push_hinge,
    quadruplet_loss,
    select_quartets,
    triplet_loss,
)
from celldag.methods.celltreeqm.model import CellTreeQMEncoder

# ---------------------------------------------------------------- model


def tiny_encoder(**overrides) -> CellTreeQMEncoder:
    settings = dict(
        n_features=6,
        proj_dim=8,
        hidden_dim=16,
        n_layers=2,
        n_heads=2,
        output_dim=4,
        dropout_data=0.1,
        dropout_metric=0.1,
    )
    return CellTreeQMEncoder(**(settings | overrides))


@pytest.mark.parametrize("norm", ["batch_norm", "layer_norm", "none"])
@pytest.mark.parametrize("gate", ["none", "sigmoid", "softmax", "gumbel"])
def test_encoder_is_permutation_equivariant_over_leaves(norm, gate):
    torch.manual_seed(0)
    model = tiny_encoder(norm=norm, gate=gate)
    model.train()
    model(torch.randn(12, 6))  # move the batch-norm running statistics off their initial values
    model.eval()
    features, order = torch.randn(10, 6), torch.randperm(10)
    torch.testing.assert_close(model(features[order]), model(features)[order])


def test_encoder_shapes():
    model = tiny_encoder()
    assert model(torch.randn(10, 6)).shape == (10, 4)
    assert model(torch.randn(1, 10, 6)).shape == (10, 4)
    with pytest.raises(ValueError, match=r"\(N, C\) or \(1, N, C\)"):
        model(torch.randn(2, 10, 6))


@pytest.mark.parametrize("gate", ["sigmoid", "softmax", "gumbel"])
@pytest.mark.parametrize("kind", ["sparsity", "retain"])
def test_gate_penalty_has_a_gradient(gate, kind):
    model = tiny_encoder(gate=gate)
    penalty = model.gate_penalty(kind)
    penalty.backward()
    penalty = penalty.detach()
    gradients = [p.grad for p in model.gate.parameters() if p.grad is not None]
    assert gradients and any(g.abs().sum() > 0 for g in gradients)
    assert 0 < float(penalty) < 1
    assert model.gate_values().shape == (6,)


def test_gates_start_open_and_no_gate_has_no_penalty():
    assert tiny_encoder(gate="softmax").gate_values().min() > 0.99
    model = tiny_encoder()
    assert model.gate_values() is None and float(model.gate_penalty("sparsity")) == 0.0


# ---------------------------------------------------------------- losses


def tree_metric_quartets(seed: int):
    """All quartets of a random 9-leaf tree with branch lengths, its distances and true topologies."""
    rng = np.random.default_rng(seed)
    parts = [f"t{i}:{rng.uniform(0.5, 2):.3f}" for i in range(9)]
    while len(parts) > 1:
        i, j = sorted(rng.choice(len(parts), size=2, replace=False), reverse=True)
        parts.append(f"({parts.pop(i)},{parts.pop(j)}):{rng.uniform(0.5, 2):.3f}")
    tree = parse_newick(parts[0] + ";")
    distances = path_distances(tree, [f"t{i}" for i in range(9)], topology_only=False)
    quartets = np.array(list(combinations(range(9), 4)))
    topology, resolved = four_point_topology(distances, quartets)
    assert resolved.all()
    return torch.tensor(distances), torch.tensor(quartets), torch.tensor(topology)


@pytest.mark.parametrize("select", ["topology_mismatch", "ordered_mismatch", "all"])
def test_additivity_loss_is_zero_on_a_tree_metric(select):
    distances, quartets, topology = tree_metric_quartets(0)
    sums = pair_sums(distances, quartets)
    for margin, sign in [(0.1, "code"), (0.0, "page")]:
        assert float(additivity_loss(sums, topology, margin=margin, margin_sign=sign, select=select)) == pytest.approx(
            0, abs=1e-12
        )
    # every gap (twice the internal path between the two pairs) exceeds the margin
    gap = (sums.sum(dim=1) - 3 * sums.gather(1, topology[:, None])[:, 0]) / 2
    assert gap.min() > 0.1
    assert float(additivity_loss(sums, topology, margin=0.1, margin_sign="page", select=select)) == pytest.approx(
        0, abs=1e-12
    )
    wrong = (topology + 1) % 3
    assert float(additivity_loss(sums, wrong, select=select)) > 0


def test_margin_sign_on_a_quartet_with_a_small_gap():
    sums = torch.tensor([[1.0, 1.05, 1.05]])  # right topology, gap 0.05 below the margin 0.1
    target = torch.tensor([0])
    page = additivity_loss(sums, target, margin=0.1, margin_sign="page", select="all")
    code = additivity_loss(sums, target, margin=0.1, margin_sign="code", select="all")
    assert float(page) == pytest.approx(30 * 0.05)
    assert float(code) == 0.0
    torch.testing.assert_close(push_hinge(sums, target, 0.1, "code"), torch.tensor([-0.15]))


def test_selection_flags_keep_exactly_their_quartets():
    sums = torch.tensor(
        [
            [1.0, 2.0, 2.5],  # right, wide gap, top two in the reference's order reversed
            [1.0, 2.5, 2.0],  # right, wide gap, top two in the reference's order
            [2.0, 1.0, 3.0],  # wrong topology
            [1.0, 1.04, 1.06],  # right, gap 0.05 < m, order reversed
            [1.0, 1.06, 1.04],  # right, gap 0.05 < m, reference order
        ]
    )
    target = torch.zeros(5, dtype=torch.long)
    hinge = push_hinge(sums, target, 0.1, "page")
    assert select_quartets(sums, target, hinge, "topology_mismatch").tolist() == [False, False, True, True, True]
    assert select_quartets(sums, target, hinge, "ordered_mismatch").tolist() == [True, False, True, True, False]
    assert select_quartets(sums, target, hinge, "all").all()
    code_hinge = push_hinge(sums, target, 0.1, "code")
    assert select_quartets(sums, target, code_hinge, "topology_mismatch").tolist() == [False, False, True, False, False]


def test_nothing_selected_gives_zero_with_a_gradient():
    sums = torch.tensor([[1.0, 2.5, 2.5]], requires_grad=True)
    loss = additivity_loss(sums, torch.tensor([0]))
    loss.backward()
    assert loss.item() == 0.0 and sums.grad is not None


@pytest.mark.parametrize("select", ["topology_mismatch", "ordered_mismatch", "all"])
@pytest.mark.parametrize("margin_sign", ["page", "code"])
def test_the_gpu_form_of_the_additivity_loss_is_the_cpu_form_up_to_summation_order(select, margin_sign):
    """On a GPU the selected quartets are summed under a mask (no count read back by the host); the value and the
    gradient are those of the gathered form the CPU computes."""
    generator = torch.Generator().manual_seed(0)
    sums = torch.rand(500, 3, generator=generator) * 4
    target = torch.randint(0, 3, (500,), generator=generator)
    hinge = push_hinge(sums, target, 0.1, margin_sign)
    selected = select_quartets(sums, target, hinge, select)
    assert 0 < int(selected.sum()) < 500 or select == "all"
    gathered_sums, masked_sums = sums.clone().requires_grad_(), sums.clone().requires_grad_()
    gathered = additivity_loss(gathered_sums, target, margin_sign=margin_sign, select=select)
    masked_hinge = push_hinge(masked_sums, target, 0.1, margin_sign)
    masked = _masked_additivity(masked_sums, target, masked_hinge, selected, w_close=1.0, w_push=30.0)
    assert masked.item() == pytest.approx(gathered.item(), rel=1e-6)
    gathered.backward()
    masked.backward()
    assert torch.allclose(masked_sums.grad, gathered_sums.grad, rtol=1e-5, atol=1e-7)


def test_the_gpu_form_with_nothing_selected_gives_zero_with_a_zero_gradient():
    sums = torch.tensor([[1.0, 2.5, 2.5]], requires_grad=True)
    target = torch.tensor([0])
    hinge = push_hinge(sums, target, 0.1, "page")
    loss = _masked_additivity(sums, target, hinge, torch.tensor([False]), w_close=1.0, w_push=30.0)
    loss.backward()
    assert loss.item() == 0.0 and torch.equal(sums.grad, torch.zeros_like(sums))


def test_label_free_closes_the_estimated_top_two():
    sums = torch.tensor([[3.0, 1.0, 2.0], [1.0, 1.5, 4.0]], requires_grad=True)
    loss = additivity_loss(sums, None)
    assert loss.item() == pytest.approx((1.0 + 2.5) / 2)
    loss.backward()
    assert sums.grad[0, 1] == 0 and sums.grad[1, 0] == 0  # the estimated topology's sum is left alone


def test_distance_preservation_loss_is_the_frobenius_norm():
    embedding = torch.tensor([[0.0, 0.0], [3.0, 4.0]])
    input_scaled = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    # D_Z/√2 = 5/√2 off the diagonal
    expected = (2 * (1 - 5 / 2**0.5) ** 2) ** 0.5
    assert float(
        distance_preservation_loss(embedding_distances(embedding), input_scaled, embedding_dim=2)
    ) == pytest.approx(expected)


def test_embedding_distances_have_finite_gradients_on_the_diagonal():
    embedding = torch.randn(5, 3, requires_grad=True)
    embedding_distances(embedding).sum().backward()
    assert torch.isfinite(embedding.grad).all()


def test_triplet_and_quadruplet_on_a_hand_computed_quartet():
    distances = torch.tensor([[0.0, 1.0, 2.0, 3.0], [1.0, 0.0, 2.5, 1.5], [2.0, 2.5, 0.0, 0.8], [3.0, 1.5, 0.8, 0.0]])
    quartets = torch.tensor([[0, 1, 2, 3], [0, 1, 2, 3], [0, 1, 2, 3]])
    target = torch.tensor([0, 1, 2])
    # (anchor, positive, negative, other): (0,1,2,3), (0,2,1,3), (0,3,1,2)
    triplets = [max(1.0 - 2.0 + 0.5, 0), max(2.0 - 1.0 + 0.5, 0), max(3.0 - 1.0 + 0.5, 0)]
    assert float(triplet_loss(distances, quartets, target, margin=0.5)) == pytest.approx(np.mean(triplets))
    quadruplets = [
        max(1.0 - 2.0 + 0.5, 0) + max(1.0 - 0.8 + 0.5, 0),
        max(2.0 - 1.0 + 0.5, 0) + max(2.0 - 1.5 + 0.5, 0),
        max(3.0 - 1.0 + 0.5, 0) + max(3.0 - 2.5 + 0.5, 0),
    ]
    assert float(quadruplet_loss(distances, quartets, target)) == pytest.approx(np.mean(quadruplets))


# ---------------------------------------------------------------- run


PARAMS = dict(
    proj_dim=8,
    hidden_dim=16,
    n_layers=1,
    n_heads=2,
    output_dim=4,
    dropout_data=0.1,
    dropout_metric=0.1,
    norm="batch_norm",
    gate="none",
    gate_penalty=0.0,
    gate_penalty_kind="sparsity",
    gate_lr=None,
    lr=1e-3,
    weight_decay=0.01,
    steps=4,
    quartets_per_step=32,
    w_distance=0.1,
    w_additivity=20.0,
    margin=0.1,
    margin_sign="page",
    select="topology_mismatch",
    validation_fraction=0.25,
    validation_quartets=32,
    validate_every=2,
    patience=None,
    checkpoint_every=2,
    checkpoint_seconds=None,
    device="cpu",
    reconstruction="nj",
    loss="additivity",
    setting="supervised",
    standardize_input=True,
    selection="holdout_refit",
    quartet_order="shuffled",
    leaf_order="given",
)
NO_SELECTION = {"selection": "none"}


@pytest.fixture(scope="module")
def sim():
    return simulate_bm(
        depth=4, n_signal=5, n_noise=2, n_spurious=1, max_walk=3.0, noise_std=1.0, measurement_std=0.5, seed=1
    )


def inputs_of(sim, tree_newick=None, replicate=True, work_dir=None) -> LineageInput:
    return LineageInput(
        names=sim.leaf_names,
        features=sim.test,
        train_features=sim.train if replicate else None,
        tree_newick=sim.tree_newick if tree_newick is None else tree_newick,
        work_dir=work_dir,
    )


@pytest.mark.parametrize("loss", ["additivity", "triplet", "quadruplet"])
@pytest.mark.parametrize(
    "setting",
    [
        {"setting": "supervised"},
        {"setting": "high_level_partition", "level": 2},
        {"setting": "partially_labelled", "known_fraction": 0.5},
    ],
)
def test_run_returns_an_embedding_a_tree_and_what_evaluation_needs(sim, loss, setting):
    result = run(inputs_of(sim), PARAMS | setting | {"loss": loss}, seed=0)
    assert result.embedding.shape == (16, 4) and result.embedding.dtype == np.float64
    assert sorted(parse_newick(result.tree_newick).leaf_names) == sorted(sim.leaf_names)
    supervision = result.uns["supervision"]
    assert supervision["setting"] == setting["setting"]
    if "level" in setting:
        assert supervision["level"] == 2
    if "known_fraction" in setting:
        assert len(supervision["known_leaves"]) == 8 and set(supervision["known_leaves"]) <= set(sim.leaf_names)
    training = result.uns["training"]
    assert training["selection"] == "holdout_refit" and training["validated_steps_run"] == 4
    assert training["steps"] in (2, 4) and training["steps_run"] == training["steps"] and training["device"] == "cpu"


def test_a_dataset_without_replicates_does_not_meet_the_supervised_need(sim):
    # config/methods.yaml: celltreeqm's supervised variant needs [replicates]; the runner checks unmet()
    assert "replicate pair" in inputs_of(sim, replicate=False).unmet("replicates")
    assert inputs_of(sim).unmet("replicates") is None


def test_label_free_ignores_the_tree(sim):
    params = PARAMS | {"setting": "label_free"}
    other_tree = "(" + ",".join(reversed(sim.leaf_names)) + ");"
    first = run(inputs_of(sim), params, seed=0)
    second = run(inputs_of(sim, tree_newick=other_tree), params, seed=0)
    np.testing.assert_array_equal(first.embedding, second.embedding)
    assert first.tree_newick == second.tree_newick
    assert first.uns["supervision"] == {"setting": "label_free", "quartet_order": "shuffled"}
    assert first.uns["training"]["selection"] == "none"  # nothing to validate against
    with pytest.raises(ValueError, match="target topologies"):
        run(inputs_of(sim), params | {"loss": "triplet"}, seed=0)


def balanced_newick(groups: list[str]) -> str:
    return f"(({groups[0]},{groups[1]}),({groups[2]},{groups[3]}));"


def test_high_level_partition_uses_only_the_partition(sim):
    names = sim.leaf_names
    clades = [names[i : i + 4] for i in range(0, 16, 4)]
    one = balanced_newick([f"(({a},{b}),({c},{d}))" for a, b, c, d in clades])
    # same depth-2 clades and clade tree, other structure inside the clades
    other = balanced_newick([f"({b},({d},({a},{c})))" for a, b, c, d in clades])
    params = PARAMS | {"setting": "high_level_partition", "level": 2}
    first = run(inputs_of(sim, tree_newick=one), params, seed=3)
    second = run(inputs_of(sim, tree_newick=other), params, seed=3)
    np.testing.assert_array_equal(first.embedding, second.embedding)
    # the check can fail: a different partition changes the result
    moved = list(clades[0][:3]) + [clades[1][0]], list(clades[1][1:]) + [clades[0][3]]
    regrouped = balanced_newick([f"(({a},{b}),({c},{d}))" for a, b, c, d in [*moved, *clades[2:]]])
    third = run(inputs_of(sim, tree_newick=regrouped), params, seed=3)
    assert not np.array_equal(first.embedding, third.embedding)


def test_each_step_draws_new_quartets_in_train_mode(sim, monkeypatch):
    drawn, modes = [], []
    sampler = ctqm_train.supervised_quartets

    def spy_sampler(*args, **kwargs):
        quartets, topology = sampler(*args, **kwargs)
        drawn.append(quartets)
        return quartets, topology

    forward = CellTreeQMEncoder.forward

    def spy_forward(self, features):
        if torch.is_grad_enabled():  # a training step; validation and the final embedding run without grad
            modes.append(self.training)
        return forward(self, features)

    monkeypatch.setattr(ctqm_train, "supervised_quartets", spy_sampler)
    monkeypatch.setattr(CellTreeQMEncoder, "forward", spy_forward)
    run(inputs_of(sim), PARAMS | NO_SELECTION, seed=0)
    assert len(drawn) == 4 and modes == [True] * 4
    assert all(not np.array_equal(a, b) for a, b in zip(drawn, drawn[1:]))


def test_gate_penalty_enters_the_loss(sim, monkeypatch):
    calls = []
    penalty = CellTreeQMEncoder.gate_penalty
    monkeypatch.setattr(CellTreeQMEncoder, "gate_penalty", lambda self, kind: calls.append(kind) or penalty(self, kind))
    run(
        inputs_of(sim),
        PARAMS | NO_SELECTION | {"gate": "sigmoid", "gate_penalty": 0.5, "gate_penalty_kind": "retain"},
        seed=0,
    )
    assert calls == ["retain"] * 4


def test_gate_lr_gives_the_gate_its_own_learning_rate():
    model = tiny_encoder(gate="sigmoid")
    shared = ctqm_train.optimizer_for(model, PARAMS)
    assert len(shared.param_groups) == 1 and shared.param_groups[0]["lr"] == PARAMS["lr"]
    assert len(ctqm_train.optimizer_for(model, PARAMS | {"gate_lr": None}).param_groups) == 1
    split = ctqm_train.optimizer_for(model, PARAMS | {"gate_lr": 0.5})
    rest, gate = split.param_groups
    assert gate["lr"] == 0.5 and gate["weight_decay"] == 0.0 and rest["lr"] == PARAMS["lr"]
    assert {id(p) for p in gate["params"]} == {id(p) for p in model.gate.parameters()}
    assert len(rest["params"]) + len(gate["params"]) == len(list(model.parameters()))
    # without a gate the option changes nothing
    assert len(ctqm_train.optimizer_for(tiny_encoder(), PARAMS | {"gate_lr": 0.5}).param_groups) == 1


def test_gate_lr_lets_the_gate_move(sim):
    moved = {}
    for gate_lr in (None, 0.1):
        seen = []
        original = ctqm_train.build_model
        ctqm_train.build_model = lambda *a, **k: seen.append(original(*a, **k)) or seen[-1]
        try:
            run(inputs_of(sim), PARAMS | NO_SELECTION | {"gate": "sigmoid", "gate_lr": gate_lr}, seed=0)
        finally:
            ctqm_train.build_model = original
        moved[gate_lr] = float((seen[-1].gate.logit.detach() - 1.0).abs().max())
    assert moved[None] < 0.01 < moved[0.1]


def test_a_rerun_resumes_from_the_checkpoint_and_matches(sim, tmp_path):
    fresh = run(inputs_of(sim), PARAMS, seed=0)
    first = run(inputs_of(sim, work_dir=str(tmp_path)), PARAMS, seed=0)
    again = run(inputs_of(sim, work_dir=str(tmp_path)), PARAMS, seed=0)
    assert (tmp_path / "checkpoint").is_dir()
    assert first.uns["training"]["resumed_from"] is None
    assert again.uns["training"]["resumed_from"] == again.uns["training"]["steps"]  # the refit's last checkpoint
    np.testing.assert_array_equal(fresh.embedding, first.embedding)
    np.testing.assert_array_equal(first.embedding, again.embedding)


def relabelled(sim, permutation) -> LineageInput:
    """The same leaves, names and tree, handed over in another row order."""
    return LineageInput(
        names=tuple(sim.leaf_names[i] for i in permutation),
        features=sim.test[permutation],
        train_features=sim.train[permutation],
        tree_newick=sim.tree_newick,
    )


@pytest.mark.parametrize("setting", [{"setting": "supervised"}, {"setting": "high_level_partition", "level": 2}])
def test_the_row_order_changes_nothing_with_shuffled_quartets_and_everything_with_sorted_ones(sim, setting):
    permutation = np.random.default_rng(7).permutation(16)
    by_name = {}
    for order in ("shuffled", "sorted"):
        params = PARAMS | setting | {"quartet_order": order}
        given, other = run(inputs_of(sim), params, seed=0), run(relabelled(sim, permutation), params, seed=0)
        back = np.empty_like(other.embedding)
        back[permutation] = other.embedding  # rows by leaf again
        by_name[order] = (np.array_equal(given.embedding, back), given.tree_newick == other.tree_newick)
    assert by_name == {"shuffled": (True, True), "sorted": (False, by_name["sorted"][1])}


def test_the_leaf_order_control_relabels_what_sorted_quartets_read(sim):
    params = PARAMS | {"setting": "high_level_partition", "level": 2}
    control = {"leaf_order": "relabelled"}
    np.testing.assert_array_equal(
        run(inputs_of(sim), params, 0).embedding, run(inputs_of(sim), params | control, 0).embedding
    )
    sorted_params = params | {"quartet_order": "sorted"}
    assert not np.array_equal(
        run(inputs_of(sim), sorted_params, 0).embedding, run(inputs_of(sim), sorted_params | control, 0).embedding
    )


def test_sorted_quartets_come_in_ascending_rank_and_keep_their_topology():
    from celldag.lineage.supervision import supervised_quartets
    from celldag.lineage.tree import parse_newick, path_distances

    names = [f"x{i}" for i in range(8)]
    tree = parse_newick("((((x0,x1),(x2,x3)),((x4,x5),(x6,x7))));")
    distances = path_distances(tree, names, topology_only=True)
    rank = np.array([7, 6, 5, 4, 3, 2, 1, 0])
    quartets, topology = supervised_quartets(distances, 200, np.random.default_rng(0), np.ones(8, bool), rank=rank)
    assert (np.diff(rank[quartets], axis=1) > 0).all()
    expected, _ = four_point_topology(distances, quartets)
    np.testing.assert_array_equal(topology, expected)


def test_selection_picks_the_step_count_without_the_held_out_leaves_then_trains_with_them(sim, monkeypatch):
    excluded_per_phase = []
    sampler = ctqm_train.supervised_quartets

    def spy(distances, count, rng, allowed_leaves, rank=None):
        excluded_per_phase.append(int((~allowed_leaves).sum()))
        return sampler(distances, count, rng, allowed_leaves, rank)

    monkeypatch.setattr(ctqm_train, "supervised_quartets", spy)
    result = run(inputs_of(sim), PARAMS | {"steps": 6}, seed=0)
    steps = result.uns["training"]["steps"]
    validation_draws = excluded_per_phase.index(4)  # the validation set is drawn first, to hold the held-out leaves
    assert excluded_per_phase[validation_draws:] == [4] * 6 + [0] * steps  # 6 selection steps, then the refit
    assert excluded_per_phase[:validation_draws] == [0] * validation_draws


def test_standardized_input_uses_the_training_replicate_statistics():
    train = np.array([[1.0, 5.0], [3.0, 5.0], [5.0, 5.0]])
    z_train, z_other = ctqm_train.standardized(train, np.array([[3.0, 6.0]]))
    np.testing.assert_allclose(z_train, [[-1.0, 0.0], [0.0, 0.0], [1.0, 0.0]])
    np.testing.assert_allclose(z_other, [[0.0, 1.0]])  # a constant feature is only centred


def test_the_step_count_is_the_latest_validation_within_one_standard_error_of_the_best():
    history = [
        {"step": 25, "val": 0.10},
        {"step": 30, "loss": 1.0, "val": None},
        {"step": 50, "val": 0.05},
        {"step": 75, "val": 0.052},
        {"step": 100, "val": 0.08},
    ]
    assert ctqm_train.chosen_steps(history, 2048) == 75  # SE at 0.05 on 2,048 quartets ≈ 0.0048
    assert ctqm_train.chosen_steps(history, 10**7) == 50  # a tiny SE: the best itself


def test_the_refit_gives_each_leaf_as_many_quartet_draws_within_the_budget():
    assert ctqm_train.refit_steps(800, n_known=100, n_held_out=20, budget=3000) == 1000  # 100/80 × 800
    assert ctqm_train.refit_steps(2800, n_known=100, n_held_out=20, budget=3000) == 3000  # never past `steps`
    assert ctqm_train.refit_steps(1, n_known=16, n_held_out=4, budget=6) == 1


def with_validation(sim, measured=None) -> LineageInput:
    validation = sim.profile + np.random.default_rng(9).normal(0.0, 0.5, size=sim.profile.shape)
    measured = np.ones(len(sim.leaf_names), dtype=bool) if measured is None else measured
    return replace(inputs_of(sim), validation_features=validation, validation_leaves=measured)


def test_selection_on_the_validation_replicate_keeps_the_best_validated_step_without_a_refit(sim, monkeypatch):
    measured = np.ones(16, dtype=bool)
    measured[[0, 5, 9]] = False  # leaves without validation cells: in no validation quartet
    inputs = with_validation(sim, measured)
    validated, excluded_per_draw = [], []
    qdist_of, sampler = ctqm_train.qdist_of, ctqm_train.supervised_quartets

    def spy_qdist(model, features, quartets, topology):
        validated.append((features.cpu().numpy(), quartets))
        return qdist_of(model, features, quartets, topology)

    def spy_sampler(distances, count, rng, allowed_leaves, rank=None):
        excluded_per_draw.append(np.flatnonzero(~allowed_leaves).tolist())
        return sampler(distances, count, rng, allowed_leaves, rank)

    monkeypatch.setattr(ctqm_train, "qdist_of", spy_qdist)
    monkeypatch.setattr(ctqm_train, "supervised_quartets", spy_sampler)
    params = PARAMS | {"selection": "auto", "steps": 8, "validate_every": 2}
    result = run(inputs, params, seed=0)
    training = result.uns["training"]
    assert training["selection"] == "validation_replicate" and "note" not in result.uns
    assert training["steps_run"] == 8 and training["validation_leaves"] == 13
    # one validation set, on the validation replicate z-scored with the training replicate's statistics
    ((features, quartets),) = validated
    _, expected = ctqm_train.standardized(sim.train, inputs.validation_features)
    np.testing.assert_allclose(features, expected.astype(np.float32))
    assert not np.isin(quartets, [0, 5, 9]).any()
    assert excluded_per_draw[0] == [0, 5, 9] and all(not e for e in excluded_per_draw[1:])  # training: every leaf
    # the kept model is the one of the best validated step: a run stopped there gives the same embedding
    stopped = run(inputs, params | {"selection": "none", "steps": training["steps"]}, seed=0)
    np.testing.assert_allclose(result.embedding, stopped.embedding, rtol=1e-6)


def test_without_a_validation_replicate_auto_falls_back_to_held_out_leaves_and_says_so(sim):
    result = run(inputs_of(sim), PARAMS | {"selection": "auto"}, seed=0)
    assert result.uns["training"]["selection"] == "holdout_refit"
    assert result.uns["note"] == ctqm_train.FALLBACK_NOTE
    asked = run(inputs_of(sim), PARAMS, seed=0)  # holdout_refit asked for: no note
    assert asked.uns["training"]["selection"] == "holdout_refit" and "note" not in asked.uns
    with pytest.raises(ValueError, match="selection: validation_replicate needs a validation replicate"):
        run(inputs_of(sim), PARAMS | {"selection": "validation_replicate"}, seed=0)
    assert (
        "validation replicate" in inputs_of(sim).unmet("validation")
        and with_validation(sim).unmet("validation") is None
    )


def test_sorted_quartets_say_when_they_cannot_reproduce_the_authors_curve():
    small = PARAMS | {"quartet_order": "sorted", "select": "ordered_mismatch"}
    assert ctqm_train.ordering_note(PARAMS) is None  # shuffled: nothing to say
    assert "changes nothing here" in ctqm_train.ordering_note(PARAMS | {"quartet_order": "sorted"})
    assert ctqm_train.ordering_note(small).startswith("smoke-sized for the official ordering (hidden_dim, lr, ")
    authors = small | ctqm_train.AUTHORS_PROTOCOL | {"steps": ctqm_train.AUTHORS_STEPS}
    assert ctqm_train.ordering_note(authors) is None
    assert ctqm_train.ordering_note(authors | {"steps": 4000}).startswith(
        "smoke-sized for the official ordering (steps "
    )
