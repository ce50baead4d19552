"""The segment's run plot (pc_pipelines/reports/run_plot.py): the stored steps (from 1) on whole-number ticks, and the
cumulative rollouts as plain counts (issue 41 points 6 and 8)."""

from __future__ import annotations

import math

from pc_pipelines.reports.run_plot import PANELS, RunProgress, plot_run_progress, run_progress_figure


def ten_steps() -> RunProgress:
    """A 10-step run (steps 1..10) evaluated before training (step 0) and after steps 5 and 10, whose cumulative
    rollouts reach 12,800: the sizes that drew ticks at 2.5 / 7.5 and a ``1e4`` offset."""
    return RunProgress(
        run_id="r", method="pc", step=tuple(range(1, 11)), mean_reward=tuple(0.1 * k for k in range(10)),
        reward_std=(0.3,) * 10, informative_share=(0.5,) * 10,
        cumulative_rollouts=tuple(1_280 * (k + 1) for k in range(10)),
        eval_step=(0, 5, 10), eval_accuracy=(0.2, 0.3, math.nan),
    )


def drawn(fig):
    fig.canvas.draw()
    return dict(zip(PANELS, fig.axes, strict=True))


def test_every_panel_shows_the_stored_steps_on_whole_number_ticks():
    axes = drawn(run_progress_figure(ten_steps(), highlight=(6, 10)))
    for name, ax in axes.items():
        lo, hi = ax.get_xlim()
        shown = [t for t in ax.get_xticks() if lo <= t <= hi]
        assert shown and all(float(t).is_integer() for t in shown), (name, shown)
        labels = [t.get_text().replace("\u2212", "-") for t in ax.get_xticklabels() if t.get_text()]
        assert all(label.lstrip("-").isdigit() for label in labels), (name, labels)
    assert list(axes["mean reward"].lines[0].get_xdata()) == list(range(1, 11))  # the stored steps
    assert list(axes["held-out accuracy"].lines[0].get_xdata()) == [0, 5, 10]  # 0: before training
    shade = axes["mean reward"].patches[0]  # the segment of steps 6..10
    assert (shade.get_x(), shade.get_x() + shade.get_width()) == (5.5, 10.5)


def test_the_rollouts_axis_shows_plain_counts_with_thousands_separators():
    ax = drawn(run_progress_figure(ten_steps()))["cumulative rollouts"]
    assert ax.yaxis.get_offset_text().get_text() == ""  # no "1e4" above the axis
    lo, hi = ax.get_ylim()
    labels = [t.get_text() for t, v in zip(ax.get_yticklabels(), ax.get_yticks(), strict=True) if lo <= v <= hi]
    assert "10,000" in labels and all("e" not in label for label in labels), labels


def test_the_png_is_written(tmp_path):
    path = plot_run_progress(ten_steps(), tmp_path / "plots" / "seg-0001.png", highlight=(6, 10))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
