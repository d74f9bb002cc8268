-- A second isolation runtime (issue 27): the engine a sandbox runs on (runc, runsc); ''
-- for records from before, which ran on runc.
ALTER TABLE sandboxes ADD COLUMN runtime TEXT NOT NULL DEFAULT '';
