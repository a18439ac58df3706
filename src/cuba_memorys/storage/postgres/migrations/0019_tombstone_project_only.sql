-- A tombstone a project bundle carried for a row this node does not have (issue 17): the
-- bundle's tombstones.json names no project, so this node cannot tell which project the row
-- was in. It is kept under the bundle's project (project_id) with project_only set, and travels
-- on only in that project's bundles, never in a bundle of every project: there a third node
-- would apply it to any row, another project's too (a project bundle's deletes would reach
-- rows it does not carry one hop later). A delete made or applied here is not project_only.
-- (A flag, not a second project id: project_id is what every project merge and re-key moves.)
ALTER TABLE tombstones ADD COLUMN project_only BOOLEAN NOT NULL DEFAULT FALSE;
