"""Deployment helpers: per-role NATS permissions and their credentials (``heddle deploy``).

Modules: ``roles`` (what each kind of Heddle process may publish and subscribe to), ``auth``
(``heddle deploy auth``: a nats-server authorization config and one credential per role).
"""
