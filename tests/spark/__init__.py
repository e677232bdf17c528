"""Tests of aiojetstream.spark on real Spark (one SparkSession per test session)."""
