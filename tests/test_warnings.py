"""The backend's warnings name the user's line, and PyTorch's own float64 arithmetic (AMP's
GradScaler) does not raise the float64 warning. Each case runs in a fresh interpreter: the
float64 warning is shown once per process."""
import json

from conftest import SCRIPT_CPU_ONLY, run_py

# Prints, as JSON, the warnings raised by the script's body: (message start, file, line).
RECORD = """
import json, warnings, torch, torch_neuronx
warnings.simplefilter("always")
_log = warnings.catch_warnings(record=True)
_caught = _log.__enter__()
def report():
    print(json.dumps([(str(w.message)[:40], w.filename, w.lineno) for w in _caught]))
"""


def _warnings(body: str) -> list:
    proc = run_py(RECORD + SCRIPT_CPU_ONLY + body + "\nreport()\n")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _line_of(body: str, marker: str) -> int:
    script = RECORD + SCRIPT_CPU_ONLY + body
    return next(i for i, line in enumerate(script.splitlines(), 1) if marker in line)


def test_float64_warning_names_the_users_line():
    body = """
def make():
    return torch.ones(3, dtype=torch.float64, device="neuron")  # a fill stores float64 exactly: no warning
x = make()
y = torch.nn.functional.softplus(x)  # float64 op here
"""
    got = [w for w in _warnings(body) if w[0].startswith("float64")]
    assert len(got) == 1, got
    assert got[0][1].endswith(".py") and "torch" not in got[0][1].split("/")[-1], got
    assert got[0][2] == _line_of(body, "float64 op here"), got


def test_fallback_warning_names_the_users_line():
    body = """
x = torch.ones(3, device="neuron")
def helper(t):
    return torch.ops.neuron_test.shift(t)  # fallback here
helper(x)
"""
    got = [w for w in _warnings(body) if w[0].startswith("Operator")]
    assert len(got) == 1 and got[0][2] == _line_of(body, "fallback here"), got


def test_grad_scaler_does_not_raise_the_float64_warning():
    body = """
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to("neuron")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("neuron")
for _ in range(3):
    with torch.autocast("neuron", dtype=torch.bfloat16):
        loss = model(torch.randn(4, 8, device="neuron")).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad()
print("scale", scaler.get_scale())
z = torch.ones(2, dtype=torch.float64, device="neuron") * 3  # the user's own float64
"""
    got = _warnings(body)
    f64 = [w for w in got if w[0].startswith("float64")]
    # The user's float64 op later in the script still gets the (one) warning: GradScaler's
    # internal use did not use it up.
    assert len(f64) == 1 and f64[0][2] == _line_of(body, "the user's own float64"), got
