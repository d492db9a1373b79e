"""benchmarks/cam_family.py runs at --quick sizes and prints each CAM's cost against a bare
forward pass measured in the same run; no timing is asserted."""

from __future__ import annotations

from test_benchmarks_smoke import run_quick, table_rows


def test_cam_family_quick(capfd) -> None:
    out = run_quick(capfd, "cam_family.py")
    rows = table_rows(out)
    assert [r[0] for r in rows] == [
        "bare forward", "gradcam", "hirescam", "gradcam-plusplus", "xgradcam", "layercam",
        "gradcam-elementwise", "eigen-gradcam", "eigencam", "scorecam", "ablationcam",
    ]  # fmt: skip
    assert rows[0][3] == "1.00" and all(float(r[3]) > 0 for r in rows)
    assert "WRONG RESULT" not in out
