"""Tools that are not pipeline stages: the demo and the JVM class-data cache."""
