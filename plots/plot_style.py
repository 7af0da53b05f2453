"""What every figure shares: phase colours, the many-runs threshold, the colour cycle, saving."""
import matplotlib.pyplot as plt

PHASE_COLORS = {"compute": "tab:blue", "communicate": "tab:orange", "wait": "tab:red",
                "evaluate": "tab:green", "synchronize": "tab:gray", "allreduce": "tab:orange",
                "push_pull": "tab:orange", "receive": "tab:purple", "apply": "tab:olive",
                "reply": "tab:cyan"}
# More runs than this in one plot: legends move outside the axes, bar labels turn.
MANY_RUNS = 6


def series_colors(n):
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return [cycle[i % len(cycle)] for i in range(n)]


def save(fig, path):
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    print(path)
