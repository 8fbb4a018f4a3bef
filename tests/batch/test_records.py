"""The batch directory: what it keeps beside its records."""

from __future__ import annotations

from harness.batch.records import BatchDir


def test_a_batch_directory_remembers_its_models_for_a_rerun(tmp_path):
    batch = BatchDir(tmp_path / "out")
    assert batch.models() == []
    batch.remember_models(["scripted:/x.yaml", "openai:gpt-5"])
    assert BatchDir(tmp_path / "out").models() == ["scripted:/x.yaml", "openai:gpt-5"]
    batch.models_file.write_text("{not json")
    assert batch.models() == []  # damaged: as if none were kept (a rerun then asks for --model)
