"""pcem-spark: path cost-sensitive naive Bayes / EM (Xiao, Liu & Song, WWW'19) on Apache Spark.

Importing the package never starts Spark; entry points build the session.
"""

__version__ = "0.1.0"
