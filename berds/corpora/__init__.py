"""berds.corpora"""
