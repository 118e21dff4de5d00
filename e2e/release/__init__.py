"""``make release``: reward-operator's images and chart built, pushed to an OCI registry, described and signed.

One version names everything: the chart's version and appVersion, and the images' tags. The modules, one job
each: ``registry`` (where to and with what credentials), ``tools`` (the programs it drives, each step timed),
``images`` (the test bed's image builds pushed, labelled and pinned by digest), ``chart`` (the chart packaged
with the release's registry and digests as its defaults, and pushed to ``oci://``), ``signing`` (cosign
signatures and the SBOMs' attestations: a key pair, or keyless in CI), and ``__main__`` (the order).
"""
