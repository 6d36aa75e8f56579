"""After ``mkdocs build``: every name of every documented module's ``__all__`` has its entry in
the built API reference (run by CI; exits 1 naming what is missing)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_pages import API  # noqa: E402

SITE = Path(__file__).resolve().parents[1] / "site"


def main() -> int:
    missing = []
    for page, modules in API.items():
        html = (SITE / "api" / page.removesuffix(".md") / "index.html").read_text()
        for mod in modules:
            name = "fairagg.models" if mod == "models" else mod
            for member in getattr(importlib.import_module(name), "__all__", []):
                if f'id="{mod}.{member}"' not in html:
                    missing.append(f"{mod}.{member}")
    if missing:
        print(f"not in the API reference: {', '.join(missing)}", file=sys.stderr)
        return 1
    print("every public name is in the API reference")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
