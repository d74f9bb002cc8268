-- cove trace REQUEST_ID finds everything one request caused: its events and the commands it
-- started or killed (logs_by_request and commands_by_request exist already).
CREATE INDEX events_by_request ON events (request_id) WHERE request_id != '';
CREATE INDEX commands_by_signal_request ON commands (signal_request_id) WHERE signal_request_id != '';
