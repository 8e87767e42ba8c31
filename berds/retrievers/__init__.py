"""berds.retrievers"""
