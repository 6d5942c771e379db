import numpy as np
import pytest
import torch

import celldag.methods.scilama.train as scilama_train
from celldag import training
from celldag.methods.scilama import fit_scilama
from celldag.methods.scilama.losses import coupled_loss, first_full_kl_epoch, kl_divergence, kl_weight
from celldag.methods.scilama.model import SciLaMA
from celldag.methods.scilama.train import gene_input_matrix, one_hot

N_CELLS, N_GENES, EMBED_DIM = 40, 12, 6


def tiny_params(**overrides) -> dict:
    params = dict(
        hidden_dims=[16, 8],
        gene_hidden_dims=[16, 8],
        latent_dim=4,
        dropout=0.1,
        lr=1e-3,
        weight_decay=0.0,
        lr_decay=0.99,
        batch_size=16,
        max_epochs=4,
        kl_warmup_epochs=1,
        kl_ramp_epochs=1,
        gamma=0.05,
        patience=2,
        min_delta=0.0,
        mode="stepwise",
        gene_input="embeddings",
        use_gene_vae=True,
        use_batch=True,
        device="cpu",
        checkpoint_every=1,
        checkpoint_seconds=None,
    )
    return params | overrides


def tiny_data(seed: int = 0):
    rng = np.random.default_rng(seed)
    expression = rng.normal(size=(N_CELLS, N_GENES)).astype(np.float32)
    train_mask = np.arange(N_CELLS) % 5 != 0
    batch = rng.integers(0, 3, size=N_CELLS)
    embeddings = rng.normal(size=(N_GENES, EMBED_DIM)).astype(np.float32)
    return expression, train_mask, batch, embeddings


def tiny_model(n_covariates: int = 0) -> SciLaMA:
    torch.manual_seed(0)
    gene_input = torch.randn(N_GENES, EMBED_DIM)
    return SciLaMA(N_GENES, n_covariates, gene_input, [16, 8], [16, 8], latent_dim=4, dropout=0.1)


# ---------------------------------------------------------------- model


def test_shapes_and_gene_input_is_a_non_persistent_buffer():
    model = tiny_model(n_covariates=3)
    cell = model.cell_side(torch.randn(5, N_GENES), torch.eye(3)[[0, 1, 2, 0, 1]])
    gene = model.gene_side()
    assert cell.z.shape == cell.mu.shape == (5, 4) and cell.h.shape == (5, 16)
    assert gene.z.shape == (N_GENES, 4) and gene.h.shape == (N_GENES, 16)
    assert model.inner_reconstruction(cell.h, gene.h).shape == (5, N_GENES)
    assert model.cell_reconstruction(cell.h).shape == (5, N_GENES)
    assert "gene_input" in dict(model.named_buffers()) and "gene_input" not in model.state_dict()


def test_reconstruction_is_inner_product_plus_per_gene_bias():
    model = tiny_model()
    with torch.no_grad():
        model.gene_bias.copy_(torch.arange(N_GENES, dtype=torch.float32))
    gene_h = model.gene_side().h
    zeros = torch.zeros(3, 16)
    torch.testing.assert_close(model.inner_reconstruction(zeros, gene_h), model.gene_bias.expand(3, -1), rtol=0, atol=0)
    cell_h = torch.randn(3, 16)
    expected = torch.einsum("cl,gl->cg", cell_h, gene_h) + model.gene_bias
    torch.testing.assert_close(model.inner_reconstruction(cell_h, gene_h), expected)


def test_eval_mode_uses_the_mean():
    model = tiny_model().eval()
    x = torch.randn(4, N_GENES)
    cell = model.cell_side(x, None)
    assert torch.equal(cell.z, cell.mu)
    assert torch.equal(model.cell_side(x, None).h, cell.h)


def test_decoder_widths_must_match_for_the_inner_product():
    with pytest.raises(ValueError, match="equal decoder widths"):
        SciLaMA(N_GENES, 0, torch.randn(N_GENES, EMBED_DIM), [16, 8], [32, 8], latent_dim=4, dropout=0.1)


# ---------------------------------------------------------------- losses


def test_kl_warmup_schedule_matches_the_paper():
    assert [kl_weight(e, 25, 20) for e in (0, 25, 26, 30, 44, 45, 100)] == pytest.approx(
        [0.0, 0.0, 0.05, 0.25, 0.95, 1.0, 1.0]
    )
    assert first_full_kl_epoch(25, 20) == 45


def test_kl_divergence_of_the_prior_is_only_the_variance_floor():
    mu, logvar = torch.zeros(2, 3), torch.zeros(2, 3)
    expected = 0.5 * 3 * (1e-4 - np.log1p(1e-4))
    torch.testing.assert_close(kl_divergence(mu, logvar), torch.full((2,), expected))


def test_alignment_contributes_exactly_nothing_at_gamma_zero():
    torch.manual_seed(1)
    x, recon, align, kl = torch.randn(5, 7), torch.randn(5, 7), torch.randn(5, 7), torch.rand(7)
    without = coupled_loss(x, recon, 0.5, kl)
    assert torch.equal(coupled_loss(x, recon, 0.5, kl, gamma=0.0, alignment=align), without)
    assert coupled_loss(x, recon, 0.5, kl, gamma=0.05, alignment=align) > without


def test_joint_phase_skips_the_alignment_product_at_gamma_zero(monkeypatch):
    model, x = tiny_model(), torch.randn(6, N_GENES)
    calls = []
    original = SciLaMA.inner_reconstruction

    def recording(self, cell, gene):
        calls.append(cell.shape[1])
        return original(self, cell, gene)

    monkeypatch.setattr(SciLaMA, "inner_reconstruction", recording)
    scilama_train._phase_loss("joint", model, x, None, gamma=0.0)(torch.arange(6), 1.0)
    assert calls == [16]  # only h·hᵀ, not z·zᵀ
    scilama_train._phase_loss("joint", model, x, None, gamma=0.05)(torch.arange(6), 1.0)
    assert sorted(calls) == [4, 16, 16]


# ---------------------------------------------------------------- inputs


def test_self_informed_gene_input_uses_training_cells_only():
    expression, train_mask, _, _ = tiny_data()
    before = gene_input_matrix(expression, train_mask, None, "self_informed")
    assert before.shape == (N_GENES, train_mask.sum())
    changed = expression.copy()
    changed[~train_mask] += 100.0
    assert np.array_equal(gene_input_matrix(changed, train_mask, None, "self_informed"), before)


def test_random_and_shuffled_gene_inputs_are_drawn_before_the_fit():
    from celldag.representation.scoring import static_vectors

    expression, train_mask, _, embeddings = tiny_data()
    shuffled = static_vectors(embeddings, "shuffled", 0)
    assert not np.array_equal(shuffled, embeddings)
    assert sorted(map(tuple, shuffled)) == sorted(map(tuple, embeddings))
    random = static_vectors(embeddings, "random", 0)
    assert random.shape == embeddings.shape and not np.isin(random, embeddings).any()
    with pytest.raises(ValueError, match="needs gene_embeddings"):
        gene_input_matrix(expression, train_mask, None, "embeddings")
    with pytest.raises(ValueError, match="the controls are drawn by static_vectors first"):
        gene_input_matrix(expression, train_mask, embeddings, "random")


def test_one_hot_zeroes_batches_unseen_in_training():
    batch, train_mask = np.array([0, 2, 2, 5]), np.array([True, True, False, False])
    assert one_hot(batch, train_mask).tolist() == [[1, 0], [0, 1], [0, 1], [0, 0]]


# ---------------------------------------------------------------- training


def test_phase_two_leaves_the_cell_side_unchanged():
    expression, train_mask, _, _ = tiny_data()
    model = tiny_model()
    x = torch.as_tensor(expression)
    cell_before = {k: v.clone() for k, v in model.state_dict().items() if k.startswith("cell_")}
    gene_before = {k: v.clone() for k, v in model.state_dict().items() if k.startswith("gene_")}
    loss_fn = scilama_train._phase_loss("gene", model, x, None, gamma=0.05)
    scilama_train._train_phase(
        "gene",
        1,
        model,
        loss_fn,
        torch.as_tensor(np.flatnonzero(train_mask)),
        torch.as_tensor(np.flatnonzero(~train_mask)),
        tiny_params(),
        seed=0,
        checkpoint_dir=None,
    )
    after = model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in cell_before.items())
    assert not all(torch.equal(after[k], v) for k, v in gene_before.items())


@pytest.mark.parametrize(
    ("overrides", "phases", "has_genes"),
    [
        ({}, ["cell", "gene", "joint"], True),
        ({"mode": "direct", "use_batch": False}, ["joint"], True),
        ({"use_gene_vae": False}, ["cell"], False),
        ({"gene_input": "self_informed"}, ["cell", "gene", "joint"], True),
    ],
)
def test_fit_outputs(overrides, phases, has_genes):
    expression, train_mask, batch, embeddings = tiny_data()
    result = fit_scilama(expression, train_mask, batch, embeddings, tiny_params(**overrides), seed=0, work_dir=None)
    assert result.cell_embedding.shape == (N_CELLS, 4) and np.isfinite(result.cell_embedding).all()
    assert (result.gene_embedding is not None) == has_genes
    if has_genes:
        assert result.gene_embedding.shape == (N_GENES, 4)
    assert list(result.phase_facts) == phases and result.device == "cpu"
    for facts in result.phase_facts.values():
        assert 2 < facts["epochs"] <= 4 and facts["best_epoch"] >= 2 and facts["seconds"] > 0


def test_same_seed_gives_identical_embeddings():
    data = tiny_data()
    first, second, other = (fit_scilama(*data, tiny_params(), seed=s, work_dir=None) for s in (3, 3, 4))
    assert np.array_equal(first.cell_embedding, second.cell_embedding)
    assert np.array_equal(first.gene_embedding, second.gene_embedding)
    assert not np.array_equal(first.cell_embedding, other.cell_embedding)


@pytest.mark.parametrize("kill_at", [3, 11, 23])  # phase 1 warm-up, phase 2 warm-up, phase 3 selection
def test_killed_run_resumes_identically(tmp_path, monkeypatch, kill_at):
    data, params = tiny_data(), tiny_params(patience=10)
    reference = fit_scilama(*data, params, seed=0, work_dir=str(tmp_path / "reference"))

    real_backward, calls = torch.Tensor.backward, [0]

    def dying_backward(self, *args, **kwargs):
        calls[0] += 1
        if calls[0] == kill_at:
            raise KeyboardInterrupt("simulated kill")
        return real_backward(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "backward", dying_backward)
    with pytest.raises(KeyboardInterrupt):
        fit_scilama(*data, params, seed=0, work_dir=str(tmp_path / "killed"))
    monkeypatch.setattr(torch.Tensor, "backward", real_backward)
    resumed = fit_scilama(*data, params, seed=0, work_dir=str(tmp_path / "killed"))
    assert np.array_equal(resumed.cell_embedding, reference.cell_embedding)
    assert np.array_equal(resumed.gene_embedding, reference.gene_embedding)


def test_a_run_killed_right_after_a_time_triggered_checkpoint_mid_epoch_resumes_identically(tmp_path, monkeypatch):
    """Checkpoints by wall time land at any step, mid-epoch included: the minibatch order of an epoch, the
    learning rate and β are functions of the step, so a resume from there sees the same ones."""
    data = tiny_data()
    params = tiny_params(patience=10, checkpoint_every=None, checkpoint_seconds=3)
    clock = [0.0]

    def one_second_a_read() -> float:
        clock[0] += 1.0
        return clock[0]

    monkeypatch.setattr(training, "_clock", one_second_a_read)
    reference = fit_scilama(*data, params, seed=0, work_dir=str(tmp_path / "reference"))

    real_write, written = training._write_atomically, []

    def write_then_die(payload, path):
        real_write(payload, path)
        written.append((path.parent.name, payload["step"]))
        if payload["step"] == 3 and path.parent.name == "cell":  # step 3: the first minibatch of an epoch of 2
            raise KeyboardInterrupt("killed right after a time-triggered checkpoint")

    monkeypatch.setattr(training, "_write_atomically", write_then_die)
    with pytest.raises(KeyboardInterrupt):
        fit_scilama(*data, params, seed=0, work_dir=str(tmp_path / "killed"))
    assert written[-1] == ("cell", 3)  # 32 training cells, batch 16: 2 steps an epoch, so step 4 starts mid-epoch
    monkeypatch.setattr(training, "_write_atomically", real_write)
    resumed = fit_scilama(*data, params, seed=0, work_dir=str(tmp_path / "killed"))
    assert np.array_equal(resumed.cell_embedding, reference.cell_embedding)
    assert np.array_equal(resumed.gene_embedding, reference.gene_embedding)
    assert resumed.phase_facts.keys() == reference.phase_facts.keys()
    for phase, facts in reference.phase_facts.items():
        assert {k: v for k, v in resumed.phase_facts[phase].items() if k != "seconds"} == {
            k: v for k, v in facts.items() if k != "seconds"
        }


def test_run_models_only_genes_with_a_static_vector_and_counts_the_rest():
    from celldag.embeddings.table import GeneTable
    from celldag.methods.scilama import run
    from celldag.representation.track import RepresentationInput

    expression, train_mask, batch, embeddings = tiny_data()
    names = tuple(f"g{i}" for i in range(N_GENES))
    table = GeneTable(gene_ids=names[3:][::-1], vectors=embeddings[3:][::-1], provider="t")  # g0–g2 have none
    inputs = RepresentationInput(
        names=tuple(f"c{i}" for i in range(N_CELLS)),
        features=expression,
        gene_names=names,
        batch=batch.astype(str),
        train_mask=train_mask,
        lognorm=np.abs(expression),
        counts=None,
        gene_embedding=table,
    )
    result = run(inputs, tiny_params(), seed=0)
    assert result.gene_ids == names[3:] and result.gene_embedding.shape == (N_GENES - 3, 4)
    assert result.uns["genes"] == {"n_modelled": N_GENES - 3, "n_without_embedding": 3}
    # the same fit as on the matching columns and rows directly
    direct = fit_scilama(
        expression[:, 3:],
        train_mask,
        np.unique(batch.astype(str), return_inverse=True)[1],
        embeddings[3:],
        tiny_params(),
        seed=0,
        work_dir=None,
    )
    assert np.array_equal(result.embedding, direct.cell_embedding)


@pytest.mark.parametrize("gene_input", ["random", "shuffled"])
def test_static_marker_scores_of_a_control_are_those_of_the_vectors_the_run_drew(tmp_path, monkeypatch, gene_input):
    import anndata
    import pandas as pd

    import celldag.methods.scilama.method as method
    from celldag.embeddings import write_table
    from celldag.embeddings.table import GeneTable, gene_frame
    from celldag.jobs.runner import output_anndata
    from celldag.representation.metrics import marker_clustering
    from celldag.representation.scoring import marker_scores
    from celldag.representation.track import RepresentationInput

    expression, train_mask, batch, embeddings = tiny_data()
    names = tuple(f"g{i}" for i in range(N_GENES))
    table = GeneTable(gene_ids=names, vectors=embeddings, provider="t")
    inputs = RepresentationInput(
        names=tuple(f"c{i}" for i in range(N_CELLS)),
        features=expression,
        gene_names=names,
        batch=batch.astype(str),
        train_mask=train_mask,
        lognorm=np.abs(expression),
        counts=None,
        gene_embedding=table,
    )
    params = tiny_params(gene_input=gene_input, max_epochs=3)
    used = {}

    def recording_fit(**arguments):
        used["vectors"] = arguments["gene_embeddings"]
        return fit_scilama(**arguments)

    monkeypatch.setattr(method, "fit_scilama", recording_fit)
    result = method.run(inputs, params, seed=3)
    # the control is drawn before the fit (static_vectors, with the run's seed) and fitted as embeddings
    from celldag.representation.scoring import static_vectors

    direct = fit_scilama(
        expression,
        train_mask,
        np.unique(batch.astype(str), return_inverse=True)[1],
        static_vectors(embeddings, gene_input, 3),
        params | {"gene_input": "embeddings"},
        seed=3,
        work_dir=None,
    )
    assert np.array_equal(result.embedding, direct.cell_embedding)

    prepared = anndata.AnnData(obs=pd.DataFrame(index=list(inputs.names)))
    output = output_anndata(prepared, result, {"seed": 3, "embedding": "go_text"}, "ok", "", "output.h5ad")
    (tmp_path / "go_text").mkdir()
    write_table(gene_frame(names, embeddings), tmp_path / "go_text/d.parquet")
    markers = {"A": ["g0", "g1", "g2", "g3"], "B": ["g4", "g5", "g6", "g7"], "C": ["g8", "g9", "g10", "g11"]}
    scores = marker_scores(output, markers, [str(tmp_path / "go_text/d.parquet")])
    drawn = marker_clustering(used["vectors"], names, markers)
    assert (scores["marker_db_static"], scores["marker_ch_static"]) == (
        drawn["davies_bouldin"],
        drawn["calinski_harabasz"],
    )
    assert scores["marker_db_static"] != marker_clustering(embeddings, names, markers)["davies_bouldin"]
