# The body's eager task (_task_py.py): a Python class on asyncio's C Future, compiled as is;
# nothing here needs C types.
