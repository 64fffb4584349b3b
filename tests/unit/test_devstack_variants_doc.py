"""devstack/README.md, stack.sh's --help and the variant scripts name the same variants and settings."""

import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
STACK = (ROOT / "devstack" / "stack.sh").read_text()
README = (ROOT / "devstack" / "README.md").read_text()
SCRIPTS = "".join(p.read_text() for p in sorted((ROOT / "devstack" / "variants").glob("*.sh")))
VARIANTS = re.search(r"^VARIANTS=\(([^)]*)\)", STACK, re.M).group(1).split()


def test_every_variant_has_its_functions_a_readme_row_and_a_help_mention():
    help_text = subprocess.run([str(ROOT / "devstack" / "stack.sh"), "--help"], capture_output=True,
                               text=True, check=True).stdout
    assert len(VARIANTS) >= 7
    stop_order = re.search(r"^STOP_ORDER=\(([^)]*)\)", STACK, re.M).group(1).split()
    assert sorted(set(VARIANTS) - set(stop_order)) == [], "variants `down` would never stop"
    for variant in VARIANTS:
        fn = variant.replace("-", "_")
        for part in ("up", "procs", "env"):
            assert re.search(rf"^{fn}_{part}\(\)", SCRIPTS, re.M), f"{fn}_{part} is missing"
        assert f"| `{variant}` |" in README, variant
        assert variant in help_text, variant


def test_every_port_override_and_env_key_is_documented():
    overrides = set(re.findall(r"\$\{(DEVSTACK_[A-Z_]+_PORT):-", SCRIPTS))
    assert len(overrides) >= 10 and {o for o in overrides if f"`{o}`" not in README} == set()
    keys = set(re.findall(r"(?:^|echo \")(DEVSTACK_[A-Z_]+)=", SCRIPTS, re.M))   # heredocs and echo
    assert len(keys) > 20 and {k for k in keys if f"`{k}`" not in README} == set()
