"""Pilot provisioning: the site director and the planner that turns a queue's waiting demand into pilots.

``service`` (the director's cycle), ``planner`` (how many pilots of which shape; pure Python, no Redis and
no batch system, so it is tested and benchmarked on its own), ``bounds`` (a lower bound on any plan's
cost), ``release`` (releasing idle pilots) and ``command`` (``pilotfish director``). The batch systems
are :mod:`pilot.backends`.
"""
