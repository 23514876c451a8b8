"""One WHEN clause of a MERGE, as the builder collects it: the core's
(``log.row_changes.merge_clauses.Clause``), in a module of its own so that the steps of a MERGE on Spark
(``merge_pruning``, ``merge_evolution``) can take clauses without importing the module that runs them."""

from airflow_provider_delta.log.row_changes.merge_clauses import Clause

__all__ = ["Clause"]
