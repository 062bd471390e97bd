"""The security headers of the package's own web pages and their JSON (the observer's view,
the agent server's chat page): nothing cached, no framing, no referrer, and a
Content-Security-Policy that runs only the page's inline script and style with this
response's nonce and lets it talk to its own origin alone."""

from __future__ import annotations

__all__ = ["page_headers"]


def page_headers(nonce: str | None = None) -> dict[str, str]:
    """The headers of one response: a page passes the `nonce` its inline `<script>` and
    `<style>` carry; JSON and event streams pass none (no script or style may run)."""
    source = f"'nonce-{nonce}'" if nonce else "'none'"
    return {
        "Cache-Control": "no-store",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "X-Frame-Options": "DENY",
        "Content-Security-Policy": (
            f"default-src 'none'; script-src {source}; style-src {source}; "
            "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
            "frame-ancestors 'none'"),
    }
