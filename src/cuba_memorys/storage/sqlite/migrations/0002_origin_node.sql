-- Shared mode provenance: the node (server process or machine) that wrote a row.
ALTER TABLE episodes ADD COLUMN origin_node TEXT;
