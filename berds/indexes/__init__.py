"""berds.indexes"""
