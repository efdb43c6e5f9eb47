"""The HTTP API (``pilotfish serve``): what users and operators do from the CLI, for holders of a token.

It is the only part users talk to in a shared deployment: it holds the control plane's credential, users hold
only tokens (:mod:`.auth`: tokens the deployment issues, or JWTs of an OIDC issuer), and it decides who may do
what (:mod:`.authz`). Every call that changes something, and every refusal, goes to the audit log (:mod:`.audit`).
Each concept has its router (:mod:`.routes`); :func:`matcher.api.app.create_app` puts them together with the
guards of :mod:`.limits` (body size, rate per identity, time). :mod:`.remote` is the other end: the
:class:`~matcher.calls.Calls` transport the CLI and :class:`~matcher.client.Client` use when ``api_url`` is set.
"""
