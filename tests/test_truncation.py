"""Texts longer than the encoder's cap are counted (issue 10, item 4)."""
from __future__ import annotations

import numpy as np
import pandas as pd
from pe_kit.report.results import summary_markdown, truncation_table
from pe_kit.run.presets import PRESETS
from pe_kit.text.tokens import token_cap, token_lengths, truncation_report


def test_truncation_count_on_hand_made_texts():
    texts = ["hello world " * 3,  # 6 word pieces + [CLS] + [SEP] = 8: fits a cap of 8 exactly
             "hello world " * 3 + "hello",  # 9: cut
             "short",  # 3
             "hello " * 40]  # 42: cut
    assert token_lengths(texts, "all-MiniLM-L6-v2").tolist() == [8, 9, 3, 42]
    rep = truncation_report({"records": texts, "bank": ["tiny bank text"]}, "all-MiniLM-L6-v2", 8)
    assert rep == {"token_cap": 8, "records_truncated": 2, "records_total": 4, "bank_truncated": 0, "bank_total": 1}
    assert token_cap("all-MiniLM-L6-v2") == 256  # the model's own cap (sentence_bert_config.json)


def test_a_counted_text_really_is_cut_by_the_encoder():
    from pe_kit.text.encoder import Encoder

    enc = Encoder(max_seq_length=8, progress=False, use_cache=False)
    long, kept = "hello world " * 10, "hello world " * 3  # 22 pieces → the encoder keeps the first 6
    a, b = enc.encode([long, kept])
    assert np.allclose(a, b, atol=1e-6)
    assert truncation_report({"records": [long, kept]}, "all-MiniLM-L6-v2", 8)["records_truncated"] == 1


def test_world_rows_and_results_md_carry_the_counts(tiny_world):
    t = tiny_world.truncation
    records = [x for s in ("aux", "calibration", "test", "canary") for u in tiny_world.users(s) for x in u.texts]
    assert t["token_cap"] == 32 and t["records_total"] == len(records) and t["bank_total"] == 1024
    assert t["records_truncated"] == int((token_lengths(records, "all-MiniLM-L6-v2") > 32).sum()) > 0
    rows = pd.DataFrame([{"notebook": "04_audit", "experiment": "mini", "study_arm": "long", "study_bank": "bankA",
                          "study_model": "all-MiniLM-L6-v2", **t}] * 3)
    anon = pd.DataFrame([{"notebook": "03_llr_checks", "experiment": "llr_check", **t}])  # rows without world names
    tab = truncation_table(pd.concat([rows, anon], ignore_index=True))
    assert len(tab) == 1 and tab.loc[0, "records_truncated"] == t["records_truncated"]
    assert tab.loc[0, "study_arm"] == "long"
    md = summary_markdown(rows)
    assert "Texts cut by the encoder" in md and f"| {t['records_truncated']} | {t['records_total']} |" in md


def test_every_preset_names_its_token_cap():
    for p in PRESETS.values():
        cap = p.max_seq_length or 256
        assert f"{cap} tokens" in p.description or f"{cap}-token" in p.description, p.name
        assert "full-length" not in p.description, p.name
