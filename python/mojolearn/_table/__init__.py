"""The numeric-profile table and the process settings that choose arithmetic,
as plain data and checks: the table itself (table.py: profiles, families, gates,
refusals by name), the measured rows read from the bench results (measured.py), the
numeric modes (modes.py: identical / deterministic / fast, per process and per
thread), the profile resolution and defaults (profiles.py) and the checkpoint rules
that build on them (checkpoint_rules.py: what a saved state records and how loading
adopts or refuses it). Nothing here touches data or the extension.

Order inside: table < measured < modes < profiles < checkpoint_rules. May import:
``_core``.
"""
