-- Filesystem-only pauses (issue 25): how a paused sandbox was paused (a filesystem pause
-- resumes by a cold boot, never by traffic) and how its TTL's auto-pause pauses ('' is the
-- server's default). Records from before keep memory: ''.
ALTER TABLE sandboxes ADD COLUMN auto_pause_kind TEXT NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN pause_kind TEXT NOT NULL DEFAULT '';
