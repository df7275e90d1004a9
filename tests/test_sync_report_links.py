"""tools/sync_report_links.py: numbers follow the build, verdict words
never change silently."""
import sync_report_links as sync  # tools/, on sys.path via conftest.py

NUMBERS = {"15_ablations": {"e19_done": "63 of 192", "gate": "passed",
                            "ratio": "1.87"}}
LINK = "results/report/book_numbers.json#15_ablations"


def test_a_stale_number_is_rewritten_and_a_current_one_kept():
    text = (f"[49 of 192]({LINK}.e19_done) and [1.87]({LINK}.ratio) and "
            f"[9.9]({LINK}.missing)")
    new, changed, refused = sync.sync(text, NUMBERS)
    assert new == (f"[63 of 192]({LINK}.e19_done) and [1.87]({LINK}.ratio)"
                   f" and [9.9]({LINK}.missing)")
    assert changed == ["15_ablations.e19_done: 49 of 192 -> 63 of 192"]
    assert refused == []


def test_a_changed_verdict_word_is_refused_and_left_as_written():
    text = f"the gate [failed]({LINK}.gate)"
    new, changed, refused = sync.sync(text, NUMBERS)
    assert new == text and changed == []
    assert refused == ["15_ablations.gate: the text says 'failed', "
                       "the build 'passed'"]
