"""The Conductor API v2's JSON shapes, shared by the HTTP API (web/api/) and the console (web/console/): requests
built from v2 bodies and query strings (api_to_wire), executor records in their v2 shape (wire_to_api), the
values both read and write (values: times, pages), and the JSON Schemas the shapes are declared with."""
